/* JSON numbers that read back bit for bit. */
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* cJSON prints a double with 15 significant digits whenever they read back within one
 * DBL_EPSILON of it, which can drop the last bit (0.30000000000000004 comes out as 0.3). A
 * model config or a checkpoint must come back exactly, so these numbers are written with the
 * fewest digits, 15 to 17, that strtod turns back into the same double. */
cJSON *attn_json_exact_number(double value)
{
    if (!isfinite(value))
        return cJSON_CreateNull();
    char text[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, value);
        if (strtod(text, NULL) == value)
            break;
    }
    /* A locale may have printed a decimal comma; JSON wants a point. */
    for (char *c = text; *c != '\0'; c++)
        if (*c != '-' && *c != '+' && *c != 'e' && (*c < '0' || *c > '9'))
            *c = '.';
    return cJSON_CreateRaw(text);
}

int attn_json_add_exact_number(cJSON *object, const char *name, double value)
{
    cJSON *item = attn_json_exact_number(value);
    if (item == NULL)
        return 0;
    if (!cJSON_AddItemToObject(object, name, item)) {
        cJSON_Delete(item);
        return 0;
    }
    return 1;
}
