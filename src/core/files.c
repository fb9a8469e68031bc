/* Writing a whole file atomically: a temporary file beside the target, flushed to disk and
 * renamed over it, so a crash, a signal or a full disk leaves the old file or the new one,
 * never half of one. Model files, checkpoints, token files, llm.c checkpoints and pictures
 * are all written here. */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static attn_status io_failure(const char *fn, const char *path, const char *step,
                              const char *subject, int error)
{
    char reason[128];
    if (strerror_r(error, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", error);
    return attn_fail(ATTN_ERR_IO, "%s: '%s': %s '%s' failed: %s", fn, path, step, subject, reason);
}

/* Makes the rename durable: until the folder's entry is on disk, a power cut may bring back
 * the old name table. */
static attn_status sync_folder(const char *fn, const char *path)
{
    const char *slash = strrchr(path, '/');
    char *folder =
        slash == NULL ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
    if (folder == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = ATTN_OK;
    int fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        status = io_failure(fn, path, "opening the folder", folder, errno);
    } else {
        /* Some file systems cannot sync a folder and say EINVAL: there is nothing to wait for. */
        if (fsync(fd) != 0 && errno != EINVAL)
            status = io_failure(fn, path, "syncing the folder", folder, errno);
        close(fd);
    }
    free(folder);
    return status;
}

attn_status attn_file_write_atomically(const char *fn, const char *path,
                                       attn_file_body_writer write_body, void *context)
{
    /* The rename would replace a device or a pipe with a regular file (as root, /dev/null or
     * /dev/full), not write into it. A folder is left to the rename, which cannot replace it. */
    struct stat existing;
    if (stat(path, &existing) == 0 && !S_ISREG(existing.st_mode) && !S_ISDIR(existing.st_mode))
        return attn_fail(ATTN_ERR_IO,
                         "%s: '%s' is a device or a pipe, not a file: files are written beside "
                         "their path and renamed over it, so give the path of a file",
                         fn, path);
    size_t temp_capacity = strlen(path) + 32;
    char *temp = malloc(temp_capacity);
    if (temp == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    snprintf(temp, temp_capacity, "%s.tmp.%ld", path, (long)getpid());

    const char *step = "creating";
    errno = 0;
    FILE *f = fopen(temp, "wb");
    int ok = f != NULL, created = f != NULL;
    if (created) {
        step = "writing";
        ok = write_body(f, context);
        if (ok) {
            step = "flushing";
            ok = fflush(f) == 0;
        }
        if (ok) {
            step = "syncing";
            ok = fsync(fileno(f)) == 0;
        }
        int error = errno;
        /* fclose also reports write errors the kernel deferred (network file systems do). */
        if (fclose(f) != 0 && ok) {
            step = "closing";
            ok = 0;
            error = errno;
        }
        errno = error;
    }
    if (ok && rename(temp, path) != 0) {
        step = "renaming";
        ok = 0;
    }
    attn_status status = ATTN_OK;
    if (!ok) {
        int error = errno != 0 ? errno : EIO;
        if (created)
            unlink(temp);
        status = io_failure(fn, path, step, temp, error);
    }
    free(temp);
    return status == ATTN_OK ? sync_folder(fn, path) : status;
}

typedef struct byte_span {
    const void *bytes;
    size_t size;
} byte_span;

static int write_span(FILE *f, void *context)
{
    const byte_span *span = context;
    return span->size == 0 || fwrite(span->bytes, 1, span->size, f) == span->size;
}

attn_status attn_file_write_bytes_atomically(const char *fn, const char *path, const void *bytes,
                                             size_t size)
{
    byte_span span = {bytes, size};
    return attn_file_write_atomically(fn, path, write_span, &span);
}
