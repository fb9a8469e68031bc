// The C interface of sentencepiece.h over libsentencepiece's C++ API. Everything that can throw
// (allocation, the library itself) runs inside guarded(), which turns any exception into a code
// and a message, so none reaches the C callers.
#include "data/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

// libsentencepiece samples with one std::mt19937 per thread, seeded once from a process-wide
// seed when the thread first samples (util.cc); SetRandomGeneratorSeed cannot reach a
// generator that already exists. The library exports the accessor without declaring it in its
// installed headers (0.1.97), so it is declared here: reseeding the calling thread's generator
// before each sentence makes a segmentation a function of its seed alone.
namespace sentencepiece
{
namespace random
{
std::mt19937 *GetRandomGenerator();
}
} // namespace sentencepiece

struct spm_processor {
    sentencepiece::SentencePieceProcessor model;
};

namespace
{

void set_error(char *error, size_t error_size, const std::string &message)
{
    if (error_size > 0)
        std::snprintf(error, error_size, "%s", message.c_str());
}

// The library's message without the source location and the failed check that its checks put
// first ("./src/x.cc(232) [expression] message"); `otherwise` when nothing else is said.
std::string readable(const sentencepiece::util::Status &status, const char *otherwise)
{
    std::string message = status.message();
    const size_t check = message.rfind("] ");
    if (message.compare(0, 2, "./") == 0 && check != std::string::npos)
        message.erase(0, check + 2);
    else if (message.compare(0, 2, "./") == 0)
        message.clear();
    return message.empty() ? otherwise : message;
}

// ---- the precompiled character maps, checked before libsentencepiece reads them ----------
//
// A model's normaliser (and denormaliser) carry a precompiled character map: a darts-clone
// double-array trie and the strings it leads to. libsentencepiece 0.1.97 checks the blob's
// outer size when loading, but its trie walk trusts every index inside (the fuzzer found a
// crash in Normalizer::NormalizePrefix), so attn walks the whole trie first and refuses a map
// with a transition or a string outside its arrays. The maps sit in the serialized model,
// which is read here by protobuf's wire format alone (the model's .pb.h is not installed).

// A protobuf varint at bytes[*at, size); false if it runs off the end or past 64 bits.
bool read_varint(const unsigned char *bytes, size_t size, size_t *at, uint64_t *value)
{
    *value = 0;
    for (int shift = 0; shift < 64 && *at < size; shift += 7) {
        const unsigned char byte = bytes[(*at)++];
        *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
        if ((byte & 0x80) == 0)
            return true;
    }
    return false;
}

// The length-delimited fields numbered `field` of a message; false if it does not parse.
bool fields_of(const unsigned char *bytes, size_t size, uint64_t field,
               std::vector<std::pair<const unsigned char *, size_t>> *found)
{
    size_t at = 0;
    while (at < size) {
        uint64_t tag = 0, value = 0;
        if (!read_varint(bytes, size, &at, &tag))
            return false;
        switch (tag & 7) {
        case 0:
            if (!read_varint(bytes, size, &at, &value))
                return false;
            break;
        case 1:
        case 5: {
            const size_t width = (tag & 7) == 1 ? 8 : 4;
            if (size - at < width)
                return false;
            at += width;
            break;
        }
        case 2:
            if (!read_varint(bytes, size, &at, &value) || value > size - at)
                return false;
            if (tag >> 3 == field)
                found->emplace_back(bytes + at, static_cast<size_t>(value));
            at += static_cast<size_t>(value);
            break;
        default:
            return false;
        }
    }
    return true;
}

uint32_t unit_at(const unsigned char *trie, size_t index)
{
    const unsigned char *u = trie + 4 * index;
    return static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 |
           static_cast<uint32_t>(u[2]) << 16 | static_cast<uint32_t>(u[3]) << 24;
}

// darts-clone's unit layout (darts.h: DoubleArrayUnit).
uint32_t unit_offset(uint32_t unit)
{
    return (unit >> 10) << ((unit & (1U << 9)) >> 6);
}

// Whether every path of the trie, for any input bytes, stays inside it and ends in a string of
// the map. Nodes are visited once each, so the walk costs 255 steps a node.
bool charmap_is_sound(const unsigned char *blob, size_t size)
{
    if (size == 0)
        return true; // no map: the identity
    if (size < 4)
        return false;
    const size_t trie_bytes = unit_at(blob, 0);
    if (trie_bytes == 0 || trie_bytes > size - 4 || trie_bytes % 4 != 0)
        return false;
    const unsigned char *trie = blob + 4;
    const size_t units = trie_bytes / 4;
    const unsigned char *strings = blob + 4 + trie_bytes;
    const size_t strings_size = size - 4 - trie_bytes;
    std::vector<bool> seen(units, false);
    std::vector<size_t> bases;
    const size_t root = unit_offset(unit_at(trie, 0));
    if (root >= units)
        return false;
    bases.push_back(root);
    while (!bases.empty()) {
        const size_t base = bases.back();
        bases.pop_back();
        for (size_t label = 1; label < 256; label++) {
            const size_t child = base ^ label;
            if (child >= units)
                return false;
            const uint32_t unit = unit_at(trie, child);
            if ((unit & ((1U << 31) | 0xFF)) != label)
                continue; // no transition on this byte: the walk stops here
            const size_t next = child ^ unit_offset(unit);
            if (next >= units)
                return false;
            if ((unit >> 8) & 1) {
                const size_t value = unit_at(trie, next) & ((1U << 31) - 1);
                if (value >= strings_size ||
                    std::memchr(strings + value, '\0', strings_size - value) == nullptr)
                    return false;
            }
            if (!seen[next]) {
                seen[next] = true;
                bases.push_back(next);
            }
        }
    }
    return true;
}

// Checks the normaliser's and the denormaliser's maps (ModelProto fields 3 and 5, each a
// NormalizerSpec whose field 2 is precompiled_charmap).
bool charmaps_are_sound(const void *bytes, size_t size)
{
    std::vector<std::pair<const unsigned char *, size_t>> specs, maps;
    if (!fields_of(static_cast<const unsigned char *>(bytes), size, 3, &specs) ||
        !fields_of(static_cast<const unsigned char *>(bytes), size, 5, &specs))
        return false;
    for (const auto &spec : specs)
        if (!fields_of(spec.first, spec.second, 2, &maps))
            return false;
    for (const auto &map : maps)
        if (!charmap_is_sound(map.first, map.second))
            return false;
    return true;
}

template <typename Body> spm_result guarded(char *error, size_t error_size, Body body)
{
    try {
        return body();
    } catch (const std::bad_alloc &) {
        set_error(error, error_size, "out of memory");
        return SPM_ERR_MEMORY;
    } catch (const std::exception &e) {
        set_error(error, error_size, e.what());
        return SPM_ERR_FORMAT;
    } catch (...) {
        set_error(error, error_size, "libsentencepiece failed");
        return SPM_ERR_FORMAT;
    }
}

// The lines attn already holds, handed to the trainer without a temporary file.
class LineIterator : public sentencepiece::SentenceIterator
{
  public:
    LineIterator(const char *const *lines, int64_t n) : lines_(lines), n_(n) { load(); }
    bool done() const override { return index_ >= n_; }
    void Next() override
    {
        index_++;
        load();
    }
    const std::string &value() const override { return value_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    void load()
    {
        if (index_ < n_)
            value_.assign(lines_[index_]);
    }
    const char *const *lines_;
    int64_t n_;
    int64_t index_ = 0;
    std::string value_;
};

} // namespace

extern "C" {

int spm_available(void)
{
    return 1;
}

spm_result spm_processor_load(const void *bytes, size_t size, spm_processor **out, char *error,
                              size_t error_size)
{
    *out = nullptr;
    return guarded(error, error_size, [&]() {
        // Owned until handed out, so that an exception the library throws frees it too.
        auto processor = std::make_unique<spm_processor>();
        const auto status = processor->model.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(bytes), size));
        // A model without pieces loads, but nothing could be encoded with it.
        if (status.ok() && processor->model.GetPieceSize() > 0 && charmaps_are_sound(bytes, size)) {
            *out = processor.release();
            return SPM_OK;
        }
        set_error(error, error_size,
                  !status.ok() ? readable(status, "its bytes do not parse as one")
                  : processor->model.GetPieceSize() == 0
                      ? std::string("the model has no pieces")
                      : std::string("its character map is corrupt"));
        return SPM_ERR_FORMAT;
    });
}

void spm_processor_free(spm_processor *processor)
{
    delete processor;
}

int32_t spm_piece_count(const spm_processor *processor)
{
    return processor->model.GetPieceSize();
}

const char *spm_piece(const spm_processor *processor, int32_t id)
{
    return processor->model.IdToPiece(id).c_str();
}

spm_piece_kind spm_piece_kind_of(const spm_processor *processor, int32_t id)
{
    const auto &model = processor->model;
    if (model.IsUnknown(id))
        return SPM_PIECE_UNKNOWN;
    if (model.IsControl(id))
        return SPM_PIECE_CONTROL;
    if (model.IsByte(id))
        return SPM_PIECE_BYTE;
    if (model.IsUnused(id))
        return SPM_PIECE_UNUSED;
    return SPM_PIECE_NORMAL;
}

void spm_special_ids(const spm_processor *processor, int32_t *unk, int32_t *bos, int32_t *eos,
                     int32_t *pad)
{
    *unk = processor->model.unk_id();
    *bos = processor->model.bos_id();
    *eos = processor->model.eos_id();
    *pad = processor->model.pad_id();
}

/* The pieces as a malloc'ed int32 array the C side owns (one spare element: never NULL). */
static spm_result hand_over(const std::vector<int> &pieces, int32_t **ids, int64_t *count,
                            char *error, size_t error_size)
{
    int32_t *copy = static_cast<int32_t *>(std::malloc((pieces.size() + 1) * sizeof *copy));
    if (copy == nullptr) {
        set_error(error, error_size, "out of memory");
        return SPM_ERR_MEMORY;
    }
    for (size_t i = 0; i < pieces.size(); i++)
        copy[i] = pieces[i];
    *ids = copy;
    *count = static_cast<int64_t>(pieces.size());
    return SPM_OK;
}

spm_result spm_encode(const spm_processor *processor, const char *text, size_t size, int32_t **ids,
                      int64_t *count, char *error, size_t error_size)
{
    *ids = nullptr;
    *count = 0;
    return guarded(error, error_size, [&]() {
        std::vector<int> pieces;
        const auto status = processor->model.Encode(absl::string_view(text, size), &pieces);
        if (!status.ok()) {
            set_error(error, error_size, readable(status, "libsentencepiece failed"));
            return SPM_ERR_FORMAT;
        }
        return hand_over(pieces, ids, count, error, error_size);
    });
}

spm_result spm_sample_encode(const spm_processor *processor, const char *text, size_t size,
                             float alpha, int nbest, uint64_t seed, int32_t **ids, int64_t *count,
                             char *error, size_t error_size)
{
    *ids = nullptr;
    *count = 0;
    return guarded(error, error_size, [&]() {
        // mt19937 takes 32 bits of seed: fold the high half in rather than drop it.
        sentencepiece::random::GetRandomGenerator()->seed(
            static_cast<std::mt19937::result_type>((seed ^ (seed >> 32)) & 0xFFFFFFFFu));
        std::vector<int> pieces;
        const auto status =
            processor->model.SampleEncode(absl::string_view(text, size), nbest, alpha, &pieces);
        if (!status.ok()) {
            set_error(error, error_size, readable(status, "libsentencepiece failed"));
            return SPM_ERR_FORMAT;
        }
        return hand_over(pieces, ids, count, error, error_size);
    });
}

int spm_can_sample(const spm_processor *processor)
{
    // The library has no public question for it: its word and char models refuse to sample,
    // so a sample of one letter answers.
    int32_t *ids = nullptr;
    int64_t count = 0;
    char error[256];
    const spm_result result =
        spm_sample_encode(processor, "a", 1, 0.5f, -1, 1, &ids, &count, error, sizeof error);
    std::free(ids);
    return result == SPM_OK;
}

spm_result spm_decode(const spm_processor *processor, const int32_t *ids, int64_t count,
                      char **text, char *error, size_t error_size)
{
    *text = nullptr;
    return guarded(error, error_size, [&]() {
        const std::vector<int> pieces(ids, ids + count);
        std::string decoded;
        const auto status = processor->model.Decode(pieces, &decoded);
        if (!status.ok()) {
            set_error(error, error_size, readable(status, "libsentencepiece failed"));
            return SPM_ERR_FORMAT;
        }
        char *copy = static_cast<char *>(std::malloc(decoded.size() + 1));
        if (copy == nullptr) {
            set_error(error, error_size, "out of memory");
            return SPM_ERR_MEMORY;
        }
        std::memcpy(copy, decoded.data(), decoded.size());
        copy[decoded.size()] = '\0';
        *text = copy;
        return SPM_OK;
    });
}

spm_result spm_train(const char *const *lines, int64_t n, const spm_train_options *options,
                     char **model, size_t *size, char *error, size_t error_size)
{
    *model = nullptr;
    *size = 0;
    return guarded(error, error_size, [&]() {
        const std::unordered_map<std::string, std::string> spec = {
            {"model_type", options->bpe ? "bpe" : "unigram"},
            {"vocab_size", std::to_string(options->vocab_size)},
            {"character_coverage", std::to_string(options->character_coverage)},
            {"byte_fallback", options->byte_fallback ? "true" : "false"},
            {"normalization_rule_name", "nmt_nfkc"},
            {"pad_id", std::to_string(options->pad_id)},
            {"bos_id", std::to_string(options->bos_id)},
            {"eos_id", std::to_string(options->eos_id)},
            {"unk_id", std::to_string(options->unk_id)},
            // The vocabulary may come out smaller than asked on a small text, as bpe:N's
            // merges may, rather than fail.
            {"hard_vocab_limit", "false"},
            // One thread and every sentence, in order: the same text gives the same model on
            // any machine, and attn's threads stay the only pool.
            {"num_threads", "1"},
            {"input_sentence_size", "0"},
            {"shuffle_input_sentence", "false"},
            // The library prints nothing: failures come back as a status.
            {"minloglevel", "3"},
        };
        sentencepiece::SetRandomGeneratorSeed(1);
        LineIterator iterator(lines, n);
        std::string serialized;
        const auto status =
            sentencepiece::SentencePieceTrainer::Train(spec, &iterator, &serialized);
        if (!status.ok()) {
            set_error(error, error_size, readable(status, "libsentencepiece failed"));
            return SPM_ERR_INVALID;
        }
        char *copy = static_cast<char *>(std::malloc(serialized.size()));
        if (copy == nullptr) {
            set_error(error, error_size, "out of memory");
            return SPM_ERR_MEMORY;
        }
        std::memcpy(copy, serialized.data(), serialized.size());
        *model = copy;
        *size = serialized.size();
        return SPM_OK;
    });
}

} // extern "C"
