/* Writing a whole file atomically: a temporary file beside the target, flushed to disk and
 * renamed over it, so a crash, a signal or a full disk leaves the old file or the new one,
 * never half of one. */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static attn_status io_error(const char *fn, const char *path, const char *step, int error)
{
    char reason[128];
    if (strerror_r(error, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", error);
    return attn_fail(ATTN_ERR_IO, "%s: '%s': %s failed: %s", fn, path, step, reason);
}

/* Makes the rename durable: until the folder's entry is on disk a power cut may undo it. */
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
        status = io_error(fn, path, "opening its folder", errno);
    } else {
        /* Some file systems cannot sync a folder and say EINVAL: there is nothing to wait for. */
        if (fsync(fd) != 0 && errno != EINVAL)
            status = io_error(fn, path, "syncing its folder", errno);
        close(fd);
    }
    free(folder);
    return status;
}

attn_status attn_write_file_atomically(const char *fn, const char *path, const void *data,
                                       size_t size)
{
    const unsigned char *bytes = data;
    size_t temp_capacity = strlen(path) + 16;
    char *temp = malloc(temp_capacity);
    if (temp == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    snprintf(temp, temp_capacity, "%s.XXXXXX", path);
    int fd = mkstemp(temp);
    if (fd < 0) {
        attn_status status = io_error(fn, path, "creating a temporary file beside it", errno);
        free(temp);
        return status;
    }
    /* mkstemp creates the file for the owner only; an output picture is an ordinary file. */
    mode_t mask = umask(0);
    umask(mask);
    const char *step = NULL;
    if (fchmod(fd, 0666 & ~mask) != 0)
        step = "setting the permissions of the temporary file";
    for (size_t done = 0; step == NULL && done < size;) {
        ssize_t wrote = write(fd, bytes + done, size - done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            step = "writing";
        else
            done += (size_t)wrote;
    }
    if (step == NULL && fsync(fd) != 0)
        step = "syncing";
    int error = errno;
    if (close(fd) != 0 && step == NULL) {
        step = "closing";
        error = errno;
    }
    if (step == NULL && rename(temp, path) != 0) {
        step = "renaming the temporary file over it";
        error = errno;
    }
    attn_status status = ATTN_OK;
    if (step != NULL) {
        unlink(temp);
        status = io_error(fn, path, step, error != 0 ? error : EIO);
    }
    free(temp);
    return status == ATTN_OK ? sync_folder(fn, path) : status;
}
