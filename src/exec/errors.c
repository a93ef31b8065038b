/* errors.c: a session's error message, SQLite style: the failing call
 * returns a status and leaves its message on the handle. In a file of its
 * own so that code linked without the engine (the fuzz target) shares it. */
#include "exec/exec.h"
#include <stdarg.h>
#include <stdio.h>

rm_status rm_session_fail(rm_session *s, rm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return st;
}

rm_status rm_session_runnable(rm_session *s, const char *fn) {
    if (!s->opt.dry_run) return RM_OK;
    return rm_session_fail(s, RM_ERR_STATE, "%s: the session was compiled with dry_run: a plan only, with no "
                           "parameters, inputs or arena; compile it without dry_run to run it", fn);
}

const char *rm_session_errmsg(const rm_session *s) { return s ? s->errmsg : "no session"; }

