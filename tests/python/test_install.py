"""`make install PREFIX=DIR` after a plain build: attn.pc names DIR (not the configured prefix),
and the README's pkg-config compile line gives a program that runs without LD_LIBRARY_PATH."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]


def _build_dir():
    library = os.environ.get("ATTN_LIBRARY")
    folder = Path(library).parent if library else _ROOT / "build"
    if not (folder / "CMakeCache.txt").exists():
        pytest.skip(f"{folder} is not a CMake build folder")
    return folder


@pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("cc") is None,
                    reason="needs pkg-config and a C compiler")
def test_install_to_another_prefix(tmp_path):
    prefix = tmp_path / "prefix"
    result = subprocess.run(["cmake", "--install", str(_build_dir()), "--prefix", str(prefix)],
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    pc_files = list(prefix.glob("lib*/**/pkgconfig/attn.pc"))
    assert len(pc_files) == 1, list(prefix.rglob("*"))
    assert f"prefix={prefix}\n" in pc_files[0].read_text()

    program = tmp_path / "version.c"
    program.write_text('#include <attn/attn.h>\n#include <stdio.h>\n'
                       'int main(void) { printf("%s\\n", attn_version()); return 0; }\n')
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc_files[0].parent))
    env.pop("LD_LIBRARY_PATH", None)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "attn"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert flags.returncode == 0, flags.stderr
    compiled = subprocess.run(f"cc '{program}' {flags.stdout.strip()} -o '{tmp_path}/version'",
                              shell=True, env=env, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    ran = subprocess.run([str(tmp_path / "version")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    installed = subprocess.run([str(prefix / "bin" / "attn"), "--version"], env=env,
                               capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0 and ran.stdout.strip() in installed.stdout, installed.stderr
