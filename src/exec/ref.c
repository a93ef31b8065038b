/* ref.c: the list of what points at a session (its optimizers), so that
 * rm_session_free can tell them it is gone (exec.h, rm_session_ref). A leaf:
 * the session and the optimizer both use it, and it uses neither. */
#include "exec/exec.h"

void rm_session_ref_attach(rm_session *s, rm_session_ref *r) {
    r->s = s;
    r->prev = NULL;
    r->next = s->refs;
    if (s->refs) s->refs->prev = r;
    s->refs = r;
}

void rm_session_ref_detach(rm_session_ref *r) {
    if (!r->s) return;
    if (r->prev) r->prev->next = r->next;
    else r->s->refs = r->next;
    if (r->next) r->next->prev = r->prev;
    r->s = NULL, r->prev = r->next = NULL;
}
