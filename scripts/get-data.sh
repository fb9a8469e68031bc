#!/usr/bin/env bash
# Fetch and prepare the real data sets of attn's recipes from the package registries.
#
#   scripts/get-data.sh [--out DIR] cmudict|bible|wordlang|fortunes ...
#
#   cmudict  CMU Pronouncing Dictionary (npm package cmu-pronouncing-dictionary) as
#            {train,dev,test}.tsv (stress removed) and {train,dev,test}.stress.tsv (stress
#            kept), "word<TAB>PH ON EMES", split by a hash of the word (90/5/5).
#   bible    Reina-Valera 1909 (Debian sword-text-sparv) aligned by verse with the World
#            English Bible (sword-text-web), dumped with mod2imp (libsword-utils), as
#            {train,dev,test}.{es,en,ref}; whole books held out for dev and test.
#   wordlang Which language is this word? Debian's word lists (wamerican, wfrench, ...) of 20
#            languages as {train,valid,test}.tsv, "lang<TAB>word", 10,000 words a language,
#            words of several languages left out, split by a hash of the word (80/10/10).
#   fortunes Which collection is this quotation from? Debian's fortunes: each collection a
#            class, each quotation one line, as {train,valid,test}.tsv, "collection<TAB>text",
#            split by a hash of the text (80/10/10).
#
# Each goes to data/<name>/ under the repository root, or to --out DIR (one data set only).
# The same packages give the same files: the npm version is pinned, the Debian packages are
# those of the release, and every step is deterministic. docs/data.md describes the outputs.
set -euo pipefail

CMUDICT_NPM_PACKAGE=cmu-pronouncing-dictionary
CMUDICT_NPM_VERSION=3.0.0
SPANISH_MODULE=spaRV1909eb
ENGLISH_MODULE=engWEB2015eb

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
helpers="$repo/scripts/data"

die() {
  printf 'get-data: %s\n' "$*" >&2
  exit 1
}

usage() {
  sed -n '2,22s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit "${1:-2}"
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

deb_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# Install the Debian packages that are missing; the package lists are refreshed only when
# an install fails, since that is slow and usually unneeded.
ensure_debs() {
  local missing=() pkg log
  for pkg in "$@"; do
    deb_installed "$pkg" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null ||
    die "needs the Debian packages ${missing[*]}, and this system has no apt-get"
  printf 'get-data: installing %s\n' "${missing[*]}"
  log=$(mktemp)
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >"$log" 2>&1; then
    if ! { as_root apt-get update -q >>"$log" 2>&1 &&
           as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
             "${missing[@]}" >>"$log" 2>&1; }; then
      tail -n 5 "$log" >&2
      rm -f "$log"
      die "cannot install the Debian packages ${missing[*]} (root or passwordless sudo is needed; as root: apt-get install ${missing[*]})"
    fi
  fi
  rm -f "$log"
}

python=/usr/bin/python3

ensure_python() {
  [ -x "$python" ] || ensure_debs python3
}

get_cmudict() {
  local out=$1 work log
  ensure_python
  command -v npm >/dev/null || ensure_debs npm
  work=$(mktemp -d)
  log="$work/npm.log"
  if ! npm install --prefix "$work" --no-save --no-audit --no-fund --ignore-scripts \
      "$CMUDICT_NPM_PACKAGE@$CMUDICT_NPM_VERSION" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -rf "$work"
    die "cannot install the npm package $CMUDICT_NPM_PACKAGE@$CMUDICT_NPM_VERSION"
  fi
  "$python" "$helpers/cmudict.py" --version "$CMUDICT_NPM_VERSION" --out "$out" \
    --source "$work/node_modules/$CMUDICT_NPM_PACKAGE/index.js" || { rm -rf "$work"; die "cmudict.py failed"; }
  rm -rf "$work"
}

deb_version() {
  dpkg-query -W -f='${Version}' "$1"
}

dump_module() {
  local module=$1 file=$2
  mod2imp "$module" >"$file" 2>"$file.err" || die "mod2imp $module failed: $(head -n 1 "$file.err")"
  [ -s "$file" ] || die "mod2imp $module wrote nothing"
}

get_bible() {
  local out=$1 work
  ensure_python
  ensure_debs libsword-utils sword-text-sparv sword-text-web
  work=$(mktemp -d)
  dump_module "$SPANISH_MODULE" "$work/es.imp"
  dump_module "$ENGLISH_MODULE" "$work/en.imp"
  "$python" "$helpers/bible.py" --es-imp "$work/es.imp" --en-imp "$work/en.imp" --out "$out" ||
    { rm -rf "$work"; die "bible.py failed"; }
  rm -rf "$work"
  cat >"$out/README" <<EOF
Made by scripts/get-data.sh bible; docs/data.md describes the files.
Spanish: Reina-Valera 1909, SWORD module $SPANISH_MODULE (Debian sword-text-sparv $(deb_version sword-text-sparv)).
English: derived from the World English Bible, SWORD module $ENGLISH_MODULE (Debian sword-text-web
$(deb_version sword-text-web)), with markup and notes removed and some verses left out.
Both texts are in the public domain. "World English Bible" is a trademark: a modified text such
as this one must not be called by that name.
EOF
  printf '  %s\n' "$out/README"
}

# The classification data sets' packages, fastText with them (scripts/ensure-packages.sh
# classify-data).
ensure_classify_data() {
  ensure_python
  "$repo/scripts/ensure-packages.sh" classify-data || die "the packages of the classification data are missing"
}

# Each language's word lists in /usr/share/dict and the packages that ship them. American and
# British English are one language, as are Norwegian bokmål and nynorsk: their union is one
# class. Left out: wbrazilian, wcanadian, wswiss and wogerman (spellings of languages already
# here) and wgerman-medical.
DICT=/usr/share/dict
WORDLANG_LISTS=(
  bg=bulgarian ca=catalan da=danish de=ngerman en=american-english en=british-english
  eo=esperanto es=spanish fo=faroese fr=french ga=irish gd=gaelic gl=galician-minimos gv=manx
  it=italian nl=dutch no=bokmaal no=nynorsk pl=polish pt=portuguese sv=swedish uk=ukrainian
)
WORDLANG_PACKAGES=(wbulgarian wcatalan wdanish wngerman wamerican wbritish wesperanto wspanish
  wfaroese wfrench wirish wgaelic wgalician-minimos wmanx witalian wdutch wnorwegian wpolish
  wportuguese wswedish wukrainian)
WORDLANG_PER_CLASS=10000

get_wordlang() {
  local out=$1 args=() about=() item pkg
  ensure_classify_data
  for item in "${WORDLANG_LISTS[@]}"; do
    [ -s "$DICT/${item#*=}" ] || die "no word list $DICT/${item#*=}"
    args+=(--list "${item%%=*}=$DICT/${item#*=}")
  done
  for pkg in "${WORDLANG_PACKAGES[@]}"; do
    about+=(--about "- Debian $pkg $(deb_version "$pkg")")
  done
  "$python" "$helpers/wordlang.py" "${args[@]}" --max-per-class "$WORDLANG_PER_CLASS" \
    --about "The word lists of these Debian packages (/usr/share/dict), under their own licences (/usr/share/doc/PACKAGE/copyright):" \
    "${about[@]}" --out "$out" || die "wordlang.py failed"
}

FORTUNES_DIR=/usr/share/games/fortunes

get_fortunes() {
  local out=$1
  ensure_classify_data
  [ -d "$FORTUNES_DIR" ] || die "no fortune folder $FORTUNES_DIR"
  "$python" "$helpers/fortunes.py" --dir "$FORTUNES_DIR" \
    --about "The collections of Debian fortunes $(deb_version fortunes) and fortunes-min $(deb_version fortunes-min) ($FORTUNES_DIR; licence: /usr/share/doc/fortunes-min/copyright)." \
    --out "$out" || die "fortunes.py failed"
}

out=
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -h|--help) usage 0 ;;
    cmudict|bible|wordlang|fortunes) names+=("$1"); shift ;;
    *) printf 'get-data: unknown argument: %s\n' "$1" >&2; usage ;;
  esac
done
[ ${#names[@]} -gt 0 ] || usage
[ -z "$out" ] || [ ${#names[@]} -eq 1 ] || die "--out takes one data set at a time"

for name in "${names[@]}"; do
  target=${out:-$repo/data/$name}
  mkdir -p "$target" || die "cannot create $target"
  target=$(cd "$target" && pwd)
  "get_$name" "$target"
  printf 'get-data: made %s in %s\n' "$name" "$target"
done
