/* jsonerr.c: the message for JSON text that cJSON refused, shared by the
 * readers of chain and graph files (src/plan/chainfile.c, graphfile.c).
 * They parse with require_null_terminated: a file with anything but white
 * space after its object (trailing junk, a second object) is refused, not
 * read up to where the object ends. */
#include "util/util.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

void rm_json_error(const char *text, const char *end, char *err, size_t errlen) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    const char *stop = NULL;
    cJSON *lenient = cJSON_ParseWithOpts(text, &stop, 0);
    if (lenient && stop)
        snprintf(err, errlen, "invalid JSON: bytes after the JSON object, at byte %zu ('%.20s'): remove them",
                 (size_t)(stop - text), stop);
    else snprintf(err, errlen, "invalid JSON near byte %zu of %zu", at, strlen(text));
    cJSON_Delete(lenient);
}
