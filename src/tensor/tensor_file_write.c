/* Writing safetensors files atomically: a temporary file in the same folder, synced to disk,
 * then renamed over the destination, so a crash or a full disk never leaves a partial file
 * where a checkpoint used to be. */
#define _POSIX_C_SOURCE 200809L

#include "tensor/tensor_file_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Element sizes in the order their tensors are laid out, so that every tensor starts at a
 * multiple of its element size without padding (the format allows none between tensors). */
static const size_t layout_sizes[] = {8, 4, 2, 1};

typedef struct tensor_plan {
    uint64_t nbytes;
    uint64_t begin;
} tensor_plan;

static int compare_names(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

/* Checks one tensor's description and computes its size in bytes. */
static attn_status plan_tensor(const attn_named_tensor *t, size_t index, tensor_plan *plan)
{
    static const char *fn = "attn_tensor_file_write";
    if (t->name == NULL)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: tensors[%zu].name must not be NULL", fn,
                         index);
    size_t name_length = strlen(t->name);
    ATTN_CHECK_ARG(name_length > 0, "%s: tensors[%zu].name is empty", fn, index);
    ATTN_CHECK_ARG(attn_utf8_error_offset(t->name, name_length) == name_length,
                   "%s: tensors[%zu].name is not valid UTF-8", fn, index);
    ATTN_CHECK_ARG(strcmp(t->name, "__metadata__") != 0,
                   "%s: tensors[%zu].name '__metadata__' is reserved for the metadata", fn, index);
    size_t element_size = attn_dtype_size(t->dtype);
    ATTN_CHECK_ARG(element_size > 0, "%s: tensor '%s' has unknown dtype %d", fn, t->name,
                   (int)t->dtype);
    ATTN_CHECK_ARG(t->ndim >= 0 && t->ndim <= ATTN_MAX_DIMS,
                   "%s: tensor '%s' has ndim %d, outside [0, %d]", fn, t->name, t->ndim,
                   ATTN_MAX_DIMS);
    uint64_t numel = 1;
    int empty = 0;
    for (int d = 0; d < t->ndim; d++) {
        ATTN_CHECK_ARG(t->shape[d] >= 0, "%s: tensor '%s' has negative shape[%d] = %lld", fn,
                       t->name, d, (long long)t->shape[d]);
        ATTN_CHECK_ARG((uint64_t)t->shape[d] <= ATTN_SAFETENSORS_MAX_INTEGER,
                       "%s: tensor '%s' shape[%d] = %lld is too large for the format", fn, t->name,
                       d, (long long)t->shape[d]);
        empty |= t->shape[d] == 0;
    }
    for (int d = 0; d < t->ndim && !empty; d++) {
        ATTN_CHECK_ARG(numel <= ATTN_SAFETENSORS_MAX_INTEGER / element_size / (uint64_t)t->shape[d],
                       "%s: tensor '%s' is too large for the format", fn, t->name);
        numel *= (uint64_t)t->shape[d];
    }
    plan->nbytes = empty ? 0 : numel * element_size;
    ATTN_CHECK_ARG(plan->nbytes == 0 || t->data != NULL,
                   "%s: tensor '%s' has %llu bytes but data is NULL", fn, t->name,
                   (unsigned long long)plan->nbytes);
    return ATTN_OK;
}

static attn_status check_metadata(const attn_metadata_entry *metadata, size_t n_metadata)
{
    static const char *fn = "attn_tensor_file_write";
    for (size_t i = 0; i < n_metadata; i++) {
        const char *key = metadata[i].key, *value = metadata[i].value;
        ATTN_CHECK_ARG(key != NULL, "%s: metadata[%zu].key must not be NULL", fn, i);
        ATTN_CHECK_ARG(value != NULL, "%s: metadata '%s' has a NULL value", fn, key);
        ATTN_CHECK_ARG(attn_utf8_error_offset(key, strlen(key)) == strlen(key),
                       "%s: metadata[%zu].key is not valid UTF-8", fn, i);
        ATTN_CHECK_ARG(attn_utf8_error_offset(value, strlen(value)) == strlen(value),
                       "%s: the value of metadata '%s' is not valid UTF-8", fn, key);
    }
    return ATTN_OK;
}

/* Names (or keys) at `first` with the given stride must all differ; `what` names them. */
static attn_status check_unique(const char *const *first, size_t stride_bytes, size_t n,
                                const char *what)
{
    if (n < 2)
        return ATTN_OK;
    const char *const **sorted = malloc(n * sizeof *sorted);
    if (sorted == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_write: out of memory");
    for (size_t i = 0; i < n; i++)
        sorted[i] = (const char *const *)((const char *)first + i * stride_bytes);
    qsort(sorted, n, sizeof *sorted, compare_names);
    attn_status status = ATTN_OK;
    for (size_t i = 1; i < n && status == ATTN_OK; i++)
        if (strcmp(*sorted[i - 1], *sorted[i]) == 0)
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                               "attn_tensor_file_write: two %s are named '%s'", what, *sorted[i]);
    free(sorted);
    return status;
}

/* Adds item under key (or to an array when key is NULL); frees item if that fails. */
static int add_item(cJSON *parent, const char *key, cJSON *item)
{
    if (item == NULL)
        return 0;
    cJSON_bool added =
        key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
    if (!added)
        cJSON_Delete(item);
    return added;
}

static cJSON *number_list(const uint64_t *values, int count)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list != NULL && i < count; i++) {
        if (!add_item(list, NULL, cJSON_CreateNumber((double)values[i]))) {
            cJSON_Delete(list);
            list = NULL;
        }
    }
    return list;
}

static cJSON *tensor_entry(const attn_named_tensor *t, const tensor_plan *plan)
{
    uint64_t shape[ATTN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        shape[d] = (uint64_t)t->shape[d];
    uint64_t offsets[2] = {plan->begin, plan->begin + plan->nbytes};
    cJSON *entry = cJSON_CreateObject();
    if (entry != NULL && add_item(entry, "dtype", cJSON_CreateString(attn_dtype_name(t->dtype))) &&
        add_item(entry, "shape", number_list(shape, t->ndim)) &&
        add_item(entry, "data_offsets", number_list(offsets, 2)))
        return entry;
    cJSON_Delete(entry);
    return NULL;
}

/* The 8-byte length and the JSON header padded with spaces to a multiple of 8 bytes, so the
 * data area (and with the layout above, every tensor) is aligned in the file. */
static attn_status build_header(const attn_named_tensor *tensors, const tensor_plan *plans,
                                size_t n_tensors, const attn_metadata_entry *metadata,
                                size_t n_metadata, unsigned char **out, size_t *out_length)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && n_metadata > 0) {
        cJSON *map = cJSON_CreateObject();
        ok = add_item(root, "__metadata__", map);
        for (size_t i = 0; ok && i < n_metadata; i++)
            ok = add_item(map, metadata[i].key, cJSON_CreateString(metadata[i].value));
    }
    for (size_t i = 0; ok && i < n_tensors; i++)
        ok = add_item(root, tensors[i].name, tensor_entry(&tensors[i], &plans[i]));
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                         "attn_tensor_file_write: out of memory building the header");
    size_t json_length = strlen(json);
    size_t padded = (json_length + 7) / 8 * 8;
    if ((uint64_t)padded > ATTN_SAFETENSORS_MAX_HEADER) {
        cJSON_free(json);
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_tensor_file_write: the header would be %zu bytes, above the "
                         "format's limit of %llu",
                         padded, (unsigned long long)ATTN_SAFETENSORS_MAX_HEADER);
    }
    unsigned char *header = malloc(8 + padded);
    if (header == NULL) {
        cJSON_free(json);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                         "attn_tensor_file_write: out of memory for a %zu-byte header", padded);
    }
    for (int b = 0; b < 8; b++)
        header[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    memcpy(header + 8, json, json_length);
    memset(header + 8 + json_length, ' ', padded - json_length);
    cJSON_free(json);
    *out = header;
    *out_length = 8 + padded;
    return ATTN_OK;
}

static void describe_error(int error, char *reason, size_t size)
{
    if (strerror_r(error, reason, size) != 0)
        snprintf(reason, size, "error %d", error);
}

/* What write_contents writes: the header, then the tensors' bytes by decreasing element size. */
typedef struct file_contents {
    const unsigned char *header;
    size_t header_length;
    const attn_named_tensor *tensors;
    const tensor_plan *plans;
    size_t n_tensors;
} file_contents;

static int write_contents(FILE *f, void *context)
{
    const file_contents *c = context;
    if (fwrite(c->header, 1, c->header_length, f) != c->header_length)
        return 0;
    for (size_t s = 0; s < sizeof layout_sizes / sizeof layout_sizes[0]; s++)
        for (size_t i = 0; i < c->n_tensors; i++)
            if (attn_dtype_size(c->tensors[i].dtype) == layout_sizes[s] && c->plans[i].nbytes > 0 &&
                fwrite(c->tensors[i].data, 1, c->plans[i].nbytes, f) != c->plans[i].nbytes)
                return 0;
    return 1;
}

attn_status attn_tensor_file_write(const char *path, const attn_named_tensor *tensors,
                                   size_t n_tensors, const attn_metadata_entry *metadata,
                                   size_t n_metadata)
{
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_ARG(path[0] != '\0', "attn_tensor_file_write: path is empty");
    ATTN_CHECK_ARG(tensors != NULL || n_tensors == 0,
                   "attn_tensor_file_write: tensors is NULL but n_tensors is %zu", n_tensors);
    ATTN_CHECK_ARG(metadata != NULL || n_metadata == 0,
                   "attn_tensor_file_write: metadata is NULL but n_metadata is %zu", n_metadata);
    ATTN_TRY(check_metadata(metadata, n_metadata));
    if (n_metadata > 0)
        ATTN_TRY(check_unique(&metadata[0].key, sizeof metadata[0], n_metadata, "metadata keys"));

    tensor_plan *plans = calloc(n_tensors > 0 ? n_tensors : 1, sizeof *plans);
    if (plans == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_write: out of memory");
    attn_status status = ATTN_OK;
    for (size_t i = 0; i < n_tensors && status == ATTN_OK; i++)
        status = plan_tensor(&tensors[i], i, &plans[i]);
    if (status == ATTN_OK && n_tensors > 0)
        status = check_unique(&tensors[0].name, sizeof tensors[0], n_tensors, "tensors");
    uint64_t offset = 0;
    for (size_t s = 0; status == ATTN_OK && s < sizeof layout_sizes / sizeof layout_sizes[0]; s++) {
        for (size_t i = 0; i < n_tensors && status == ATTN_OK; i++) {
            if (attn_dtype_size(tensors[i].dtype) != layout_sizes[s])
                continue;
            plans[i].begin = offset;
            offset += plans[i].nbytes;
            if (offset > ATTN_SAFETENSORS_MAX_INTEGER)
                status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                                   "attn_tensor_file_write: the tensors total more than 2^53 "
                                   "bytes, too large for the format");
        }
    }
    unsigned char *header = NULL;
    size_t header_length = 0;
    if (status == ATTN_OK)
        status =
            build_header(tensors, plans, n_tensors, metadata, n_metadata, &header, &header_length);
    if (status == ATTN_OK) {
        file_contents contents = {header, header_length, tensors, plans, n_tensors};
        status =
            attn_file_write_atomically("attn_tensor_file_write", path, write_contents, &contents);
    }
    free(header);
    free(plans);
    return status;
}

/* ---- temporaries of killed writers ---------------------------------------------------- */

/* The pid in a name "<prefix><pid>", or 0 when the rest of the name is not a positive
 * number. */
static long temporary_pid(const char *name, size_t prefix_length)
{
    char *end = NULL;
    errno = 0;
    const long pid = strtol(name + prefix_length, &end, 10);
    if (errno != 0 || end == name + prefix_length || *end != '\0' || pid <= 0)
        return 0;
    return pid;
}

attn_status attn_tensor_file_remove_stale_temporaries(const char *path, int64_t *removed)
{
    static const char fn[] = "attn_tensor_file_remove_stale_temporaries";
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_ARG(path[0] != '\0', "%s: path is empty", fn);
    if (removed != NULL)
        *removed = 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    const size_t folder_length = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
    const size_t prefix_length = strlen(base) + sizeof ".tmp." - 1;
    char *folder = malloc(folder_length + 1);
    char *prefix = malloc(prefix_length + 1);
    if (folder == NULL || prefix == NULL) {
        free(folder);
        free(prefix);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    memcpy(folder, slash == NULL ? "." : slash == path ? "/" : path, folder_length);
    folder[folder_length] = '\0';
    snprintf(prefix, prefix_length + 1, "%s.tmp.", base);
    attn_status status = ATTN_OK;
    DIR *dir = opendir(folder);
    if (dir == NULL) {
        /* No folder, no temporaries: the write that follows will name the problem. */
        if (errno != ENOENT)
            status = attn_fail(ATTN_ERR_IO, "%s: cannot read folder %s: %s", fn, folder,
                               strerror(errno));
        goto done;
    }
    struct dirent *entry;
    while (status == ATTN_OK && (entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, prefix, prefix_length) != 0)
            continue;
        const long pid = temporary_pid(entry->d_name, prefix_length);
        /* A writer that still runs (or that we may not signal) keeps its file. */
        if (pid == 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        const size_t full_size = folder_length + strlen(entry->d_name) + 2;
        char *full = malloc(full_size);
        if (full == NULL) {
            status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
            break;
        }
        snprintf(full, full_size, "%s/%s", folder, entry->d_name);
        if (remove(full) != 0 && errno != ENOENT)
            status = attn_fail(ATTN_ERR_IO, "%s: cannot remove %s: %s", fn, full, strerror(errno));
        else if (removed != NULL)
            ++*removed;
        free(full);
    }
    closedir(dir);
done:
    free(folder);
    free(prefix);
    return status;
}

attn_status attn_tensor_file_check_writable(const char *path)
{
    static const char fn[] = "attn_tensor_file_check_writable";
    ATTN_CHECK_ARG(path != NULL && path[0] != '\0', "%s: the path is empty", fn);
    struct stat info;
    if (stat(path, &info) == 0 && S_ISDIR(info.st_mode))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: '%s' is a folder, not a file name", fn,
                         path);
    size_t capacity = strlen(path) + 32;
    char *probe = malloc(capacity);
    if (probe == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    snprintf(probe, capacity, "%s.tmp.%ld", path, (long)getpid());
    attn_status status = ATTN_OK;
    const int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        char reason[128];
        describe_error(errno, reason, sizeof reason);
        status = attn_fail(ATTN_ERR_IO, "%s: cannot write '%s' (creating '%s': %s)", fn, path,
                           probe, reason);
    } else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return status;
}

struct attn_tensor_file_lock {
    int fd;
    char *lock_path;
};

/* The holder's pid, for the message another process gets; when it cannot be written (a full
 * disk) only that message is poorer: the lock holds all the same. */
static int write_holder_pid(int fd)
{
    char pid[32];
    const int length = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    return ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)length, 0) == length;
}

attn_status attn_tensor_file_lock_path(const char *path, attn_tensor_file_lock **out)
{
    static const char fn[] = "attn_tensor_file_lock_path";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(path != NULL && path[0] != '\0', "%s: the path is empty", fn);
    attn_tensor_file_lock *lock = calloc(1, sizeof *lock);
    size_t capacity = strlen(path) + sizeof ".lock";
    char *lock_path = malloc(capacity);
    if (lock == NULL || lock_path == NULL) {
        free(lock);
        free(lock_path);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    snprintf(lock_path, capacity, "%s.lock", path);
    const int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    char reason[128];
    if (fd < 0) {
        describe_error(errno, reason, sizeof reason);
        free(lock);
        free(lock_path);
        return attn_fail(ATTN_ERR_IO, "%s: cannot create '%s.lock': %s", fn, path, reason);
    }
    /* A POSIX record lock on the whole file: released by the kernel when the process ends, so
     * a killed run never leaves a path locked. */
    struct flock whole = {0};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;
    if (fcntl(fd, F_SETLK, &whole) != 0) {
        const int error = errno;
        char holder[32] = "";
        const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        free(lock);
        free(lock_path);
        if (error == EACCES || error == EAGAIN)
            return attn_fail(ATTN_ERR_IO,
                             "%s: '%s' is being written by another process%s%s%s; wait for it "
                             "to finish or write elsewhere",
                             fn, path, holder[0] != '\0' ? " (pid " : "", holder,
                             holder[0] != '\0' ? ")" : "");
        describe_error(error, reason, sizeof reason);
        return attn_fail(ATTN_ERR_IO, "%s: cannot lock '%s.lock': %s", fn, path, reason);
    }
    (void)write_holder_pid(fd);
    lock->fd = fd;
    lock->lock_path = lock_path;
    *out = lock;
    return ATTN_OK;
}

void attn_tensor_file_unlock(attn_tensor_file_lock *lock)
{
    if (lock == NULL)
        return;
    /* Removed while still held, so no second process can lock the file being removed. */
    unlink(lock->lock_path);
    close(lock->fd);
    free(lock->lock_path);
    free(lock);
}
