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
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

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
        spm_processor *processor = new spm_processor;
        const auto status = processor->model.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(bytes), size));
        // A model without pieces loads, but nothing could be encoded with it.
        if (status.ok() && processor->model.GetPieceSize() > 0) {
            *out = processor;
            return SPM_OK;
        }
        set_error(error, error_size,
                  status.ok() ? std::string("the model has no pieces")
                              : readable(status, "its bytes do not parse as one"));
        delete processor;
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
    });
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
