# null_api.awk: writes the NULL-argument test of the public API.
#
#   cc -E -P -Iinclude include/remat.h | awk -f tests/null_api.awk > test_null_api.c
#
# Reads every function the (preprocessed) header declares and, for each of
# its pointer arguments, writes one call with that argument NULL and every
# other argument valid (the fixture of tests/null_api.h). Each call must
# survive (no crash, no sanitizer report, no hang) and, unless the header
# documents the argument as optional (NULLABLE below), fail: an rm_status
# other than RM_OK with a message (in the err buffer, or on the session or
# graph it was given), or -1 from a graph builder. Two more sets of calls
# follow the same reading of the header: every function that takes a
# session, given one compiled with dry_run (dry_calls), and every scalar
# argument at the ends of its type (extreme_calls). A new function is in the
# test as soon as it is declared; a new handle type with no fixture value
# stops the generation, naming it (add it to value() and to null_api.h).

BEGIN {
    # Arguments the header documents as optional: NULL is a valid call.
    split("rm_input.name rm_stage_begin.name rm_custom.user rm_step.loss rm_step_micro.m " \
          "rm_step_micro.loss rm_forward.loss rm_step_accumulate.user rm_step_accumulate.loss " \
          "rm_compile.o rm_optim_new.c rm_optim_step.grad_norm rm_session_rank.size " \
          "rm_save_state.o rm_load_state.o rm_save_run.o rm_file_restore.o rm_file_verify.digest " \
          "rm_file_verify.present rm_read_file.len rm_seq2seq_batch.p rm_seq2seq_fill.p " \
          "rm_parse_strategy.param rm_parse_size.fraction rm_constant_i32.name rm_custom.name " \
          "rm_data_from_bytes.name rm_data_from_tokens.name rm_step_accumulate.fill " \
          "rm_optim_state.m rm_optim_state.v rm_optim_state.t rm_store_frozen.n rm_hf_store_frozen.n rm_hf_mark_loaded.n " \
          "rm_file_mark_loaded.n " \
          "rm_hf_load.n_loaded", opt, " ")
    for (i in opt) nullable[opt[i]] = 1
    # Sizes of the caller's buffers (extreme_calls leaves them valid): rows
    # and columns of the batches written into the caller's arrays, the count
    # of micro-batches asked for (each a step).
    split("rm_data_batch:B rm_data_batch:T rm_data_batch_mlp:B rm_data_batch_mlp:T rm_seq2seq_batch:B " \
          "rm_seq2seq_batch:T rm_seq2seq_row:T rm_seq2seq_reverse_pair:T rm_step_accumulate:k", szl, " ")
    for (i in szl) sizes[szl[i]] = 1
}

{ text = text " " $0 }

END {
    gsub(/[ \t]+/, " ", text)
    depth = 0; stmt = ""; n = length(text)
    for (i = 1; i <= n; i++) {
        c = substr(text, i, 1)
        if (c == "{") { if (depth++ == 0) stmt = stmt " {} "; continue }
        if (c == "}") { depth--; continue }
        if (depth > 0) continue
        if (c == ";") { statement(stmt); stmt = ""; continue }
        stmt = stmt c
    }
    emit()
}

function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }

# Types: opaque handles (typedef struct X X;), function-pointer typedefs.
function statement(s,    m) {
    s = trim(s)
    if (s ~ /^typedef/) {
        if (s ~ /^typedef struct [a-z_0-9]+ [a-z_0-9]+$/ && s !~ /\{\}/) { split(s, m, " "); opaque[m[4]] = 1 }
        if (match(s, /\(\*rm_[a-z0-9_]+\)/)) fnptr[substr(s, RSTART + 2, RLENGTH - 3)] = 1
        return
    }
    if (s !~ /^[a-zA-Z_].*[ *]rm_[a-z0-9_]+ ?\(.*\)$/ || s ~ /\{\}/) return
    nfn++
    fn_text[nfn] = s
}

# A parameter's type, normalised: spaces only between words ("const char*const*").
function norm(t) {
    t = trim(t); gsub(/ *\* */, "*", t); gsub(/\*const/, "*const", t); return t
}

# A valid value of type t for parameter `name` of function f.
function value(f, t, name, ptr,    base) {
    if (f == "rm_compile" && name == "g") return "null_built_graph()"
    if (name == "path") {
        if (f ~ /^rm_(load_params|load_state|file_open|read_file|data_load_file)$/) return "F.ckpt"
        if (f == "rm_pairs_load") return "F.pairs_path"
        return "F.out"
    }
    if (f == "rm_hf_open" && name == "dir") return "F.hf_dir"
    if (f == "rm_scratch_check" && name == "dir") return "F.dir"
    if (f == "rm_parse_strategy" && name == "s") return "\"sqrt\""
    if (f == "rm_parse_size" && name == "s") return "\"1GiB\""
    if (f == "rm_read_file" && name == "max_bytes") return "(size_t)1 << 24"
    if (t in fnptr) return (t == "rm_custom_forward" ? "null_fwd" : t == "rm_custom_backward" ? "null_bwd" : \
                            t == "rm_fill_fn" ? "null_fill" : "")
    if (!ptr) {
        if (t == "rm_val") return "0"
        if (t ~ /^rm_/ && t !~ /\*/) {
            if (t == "rm_dtype") return "RM_DTYPE_F32"
            if (t == "rm_init") return "RM_INIT_ZEROS"
            if (t == "rm_policy") return "RM_POLICY_SAVE"
            if (t == "rm_strategy") return "RM_STRATEGY_SQRT"
            return "(" t ")0"
        }
        if (name == "ndim") return "2"
        if (name ~ /^(heads|B|ns|nt)$/) return "2"
        if (name ~ /^(n_meta|n_extra|k|max_batches|seed|t|causal)$/) return "1"
        if (name == "T") return "8"
        if (name == "vocab") return "32"
        if (name == "dim") return "16"
        if (name == "n") return "4"
        if (name == "points") return "3"
        if (name == "errlen") return "sizeof F.err"
        if (name == "cap") return "sizeof F.buf"
        if (name == "budget") return "1000000"
        if (name == "val_fraction") return "0.1"
        if (name ~ /^(lr|p)$/) return "0.001f"
        if (name == "std") return "0.02f"
        if (name == "eps") return "1e-5f"
        if (name == "theta") return "1e4f"
        if (name == "ignore_id") return "-1"
        return "0"
    }
    if (t == "rm_graph*") return "null_fresh_graph()"
    if (t == "const rm_graph*") return "F.g"
    if (t ~ /^(const )?rm_session\*$/) return "F.s"
    if (t ~ /^(const )?rm_optim\*$/) return "F.opt"
    if (t ~ /^(const )?rm_file\*$/) return "F.file"
    if (t == "rm_session**") return "&F.s_out"
    if (t == "rm_optim**") return "&F.opt_out"
    if (t == "rm_file**") return "&F.file_out"
    if (t == "rm_out**") return "&F.out_out"
    if (t == "rm_out*") return "F.out_w"
    if (t ~ /^(const )?rm_hf\*$/) return "F.hf"
    if (t == "rm_hf**") return "&F.hf_out"
    if (t ~ /^(const )?rm_dataset\*$/) return "&F.d"
    if (t == "const rm_model_io*") return "&F.io"
    if (t == "const rm_pairs*") return "&F.pairs"
    if (t == "const rm_options*") return "&F.opts"
    if (t == "const rm_optim_config*") return "&F.oc"
    if (t == "const rm_gpt_config*") return "&F.gc"
    if (t == "const rm_mlp_config*") return "&F.mc"
    if (t == "const rm_llama_config*") return "&F.lc"
    if (t == "const rm_encdec_config*") return "&F.ec"
    if (t == "const rm_run_info*") return "&F.ri"
    if (t == "const rm_lr_schedule*") return "&F.lr"
    if (t == "const rm_micro*") return "&F.micro"
    if (t == "const rm_chart*") return "&F.chart"
    if (t == "FILE*") return "F.devnull"
    if (t == "const char*") {
        if (name == "chain_json") return "F.chain"
        if (name == "graph_json") return "F.graph_json"
        if (name == "key") return "\"k\""
        return "\"x\""
    }
    if (t == "const char*const*") return (name == "values" ? "F.values" : "F.keys")
    if (t == "char*") return (name == "err" ? "F.err" : name == "digest" ? "F.digest" : "F.buf")
    if (t == "char**") return "&F.res"
    if (t ~ /^(const )?int64_t\*$/) return (name == "shape" ? "F.shape" : "&F.i64")
    if (t ~ /^(const )?int32_t\*$/) return "F.i32"
    if (t ~ /^(const )?unsigned char\*$/) return "F.u8"
    if (t == "float*") return "F.f32"
    if (t == "float**") return "&F.fp"
    if (t == "double*") return "&F.dbl"
    if (t == "int*") return "&F.i"
    if (t == "uint64_t*") return "&F.u64"
    if (t == "size_t*") return "&F.sz"
    if (t == "void*") return "&F.i"
    if (t == "rm_strategy*") return "&F.strat"
    # any other struct: zeroed memory (an out-struct, or an empty config)
    base = t; sub(/^const /, "", base); sub(/\*+$/, "", base)
    if (base in opaque) {
        printf "null_api.awk: no fixture value for %s (argument %s of %s): add one\n", t, name, f > "/dev/stderr"
        failed = 1; exit 1
    }
    return "(void *)F.scratch"
}

# A session compiled with dry_run holds a plan only (no parameters, inputs or
# arena): every function that takes a (non-const) session, given one, must
# refuse with RM_ERR_STATE and a message (NULL for a pointer), except
# rm_session_free; a function that reads a const session must just survive.
# (No optimizer of a dry-run session exists: its optimizer arguments are NULL.)
function dry_calls(name, ret, np, pt, pn, ptr,    j, k, call, label) {
    if (name == "rm_session_free") return
    for (k = 1; k <= np; k++) if (pt[k] ~ /^(const )?rm_session\*$/) break
    if (k > np) return
    call = name "("
    for (j = 1; j <= np; j++)
        call = call (j > 1 ? ", " : "") (j == k ? "F.dry" : pt[j] == "rm_optim*" ? "NULL" : \
                                         "(" pt[j] ")(" value(name, pt[j], pn[j], ptr[j]) ")")
    call = call ")"
    nc++
    label = name "(a dry-run session)"
    printf "static int call_%d(void) { /* %s */\n", nc, label
    if (pt[k] ~ /^const/ || ret !~ /^(rm_status|void\*|float\*)$/)
        printf "    %s;\n    return 1;\n}\n", (ret == "void" ? call : "(void)" call)
    else if (ret == "rm_status")
        printf "    rm_status st = %s;\n    return st == RM_ERR_STATE && (F.err[0] || rm_session_errmsg(F.dry)[0]);\n}\n", call
    else
        printf "    return %s == NULL && rm_session_errmsg(F.dry)[0];\n}\n", call
    labels[nc] = label
}

# Scalars at the ends of their types (INT_MAX, -1, NaN, 1e30, an enum out of
# range), one argument at a time, the others valid: the call must survive
# (no undefined behaviour under UBSan, no crash, no hang) whatever it
# returns. Arguments that tell the size of the caller's own buffers are
# left valid (a lie about them is the caller's bug, not the library's).
function extreme_calls(name, ret, np, pt, pn, ptr,    j, k, v, nv, vals, call, label) {
    for (k = 1; k <= np; k++) {
        if (ptr[k] || (pn[k] ~ /^(errlen|cap|n|ns|nt|n_meta|n_extra)$/) || (name ":" pn[k]) in sizes) continue
        t = pt[k]; sub(/^const /, "", t)
        if (t == "int") nv = split("INT_MAX INT_MIN -1", vals, " ")
        else if (t == "int64_t") nv = split("INT64_MAX INT64_MIN", vals, " ")
        else if (t == "uint64_t") nv = split("UINT64_MAX", vals, " ")
        else if (t == "size_t") nv = split("SIZE_MAX", vals, " ")
        else if (t == "uint32_t") nv = split("UINT32_MAX", vals, " ")
        else if (t == "int32_t") nv = split("INT32_MIN INT32_MAX", vals, " ")
        else if (t == "float") nv = split("NAN INFINITY -1e30f", vals, " ")
        else if (t == "double") nv = split("NAN INFINITY -1e300", vals, " ")
        else if (t == "rm_val") nv = split("INT_MAX -7", vals, " ")
        else if (t ~ /^rm_/) { nv = 2; vals[1] = "(" t ")99"; vals[2] = "(" t ")-1" }
        else { printf "null_api.awk: %s: no extreme values for type %s\n", name, t > "/dev/stderr"; failed = 1; exit 1 }
        for (v = 1; v <= nv; v++) {
            call = name "("
            for (j = 1; j <= np; j++)
                call = call (j > 1 ? ", " : "") (j == k ? vals[v] : "(" pt[j] ")(" value(name, pt[j], pn[j], ptr[j]) ")")
            call = call ")"
            nc++
            label = name "(" pn[k] " = " vals[v] ")"
            printf "static int call_%d(void) { /* %s */\n    %s;\n    return 1;\n}\n", nc, label, \
                (ret == "void" ? call : "(void)" call)
            labels[nc] = label
        }
    }
}

function emit(    i, j, k, kk, hassession, noerr, errpos, s, ret, name, args, np, p, pt, pn, ptr, call, expect, msg, errarg, label) {
    if (failed) exit 1
    print "/* test_null_api.c: GENERATED by tests/null_api.awk from include/remat.h; do not edit."
    print " * Every pointer argument of every public function, NULL, the others valid. */"
    print "#include \"null_api.h\"\n#include <limits.h>\n#include <math.h>\n"
    nc = 0
    for (i = 1; i <= nfn; i++) {
        s = fn_text[i]
        match(s, /rm_[a-z0-9_]+ ?\(/)
        ret = norm(substr(s, 1, RSTART - 1)); name = substr(s, RSTART, RLENGTH); sub(/ ?\($/, "", name)
        args = substr(s, RSTART + RLENGTH); sub(/\)$/, "", args)
        np = 0
        if (trim(args) != "void") np = split(args, p, ",")
        for (j = 1; j <= np; j++) {
            pt[j] = trim(p[j]); ptr[j] = 0
            # an array parameter (int64_t shape[4]) is a pointer
            if (pt[j] ~ /\]$/) { ptr[j] = 1; sub(/ ?\[[^]]*\]$/, "", pt[j]) }
            match(pt[j], /[A-Za-z_][A-Za-z_0-9]*$/)
            pn[j] = substr(pt[j], RSTART); pt[j] = norm(substr(pt[j], 1, RSTART - 1))
            if (ptr[j]) pt[j] = pt[j] "*"
            if (pt[j] == "") {
                printf "null_api.awk: %s: an unnamed parameter (%s): name it in remat.h\n", name, p[j] > "/dev/stderr"
                exit 1
            }
            if (pt[j] ~ /\*/ || pt[j] in fnptr) ptr[j] = 1
        }
        # the position of an err buffer: each NULL is tried again with err NULL too
        errpos = 0
        for (j = 1; j <= np; j++) if (pn[j] == "err" && pt[j] == "char*") errpos = j
        for (kk = 1; kk <= np * (errpos ? 2 : 1); kk++) {
            k = kk > np ? kk - np : kk
            noerr = kk > np
            if (!ptr[k] || (noerr && k == errpos)) continue
            nc++
            call = name "("
            errarg = ""
            for (j = 1; j <= np; j++) {
                call = call (j > 1 ? ", " : "")
                if (j == k || (noerr && j == errpos)) call = call "NULL"
                else {
                    call = call "(" pt[j] ")(" value(name, pt[j], pn[j], ptr[j]) ")"
                    if (pn[j] == "err" && pt[j] == "char*") errarg = "F.err[0]"
                }
            }
            call = call ")"
            if (failed) exit 1
            # where the message of a failure lands
            # (an optimizer's messages are its session's, F.s)
            msg = "1"
            hassession = 0
            for (j = 1; j <= np; j++) if (pt[j] == "rm_session*") hassession = j
            if (errarg != "") msg = errarg
            else if (hassession && hassession != k) msg = "rm_session_errmsg(F.s)[0]"
            else if (!hassession) {
                for (j = 1; j <= np; j++)
                    if (j != k && pt[j] ~ /^(const )?rm_optim\*$/) msg = "rm_session_errmsg(F.s)[0]"
            }
            label = name "(" pn[k] (noerr ? " and err" : "") " NULL)"
            printf "static int call_%d(void) { /* %s */\n", nc, label
            if ((name "." pn[k]) in nullable || pn[k] == "err" || ret !~ /^(rm_status|rm_val)$/) {
                printf "    %s;\n    return 1;\n}\n", (ret == "void" ? call : "(void)" call)
            } else if (ret == "rm_status") {
                printf "    rm_status st = %s;\n    return st != RM_OK && %s;\n}\n", call, msg
            } else {
                printf "    return %s == -1;\n}\n", call
            }
            labels[nc] = label
        }
        dry_calls(name, ret, np, pt, pn, ptr)
        extreme_calls(name, ret, np, pt, pn, ptr)
    }
    print "\nint main(void) {\n    null_setup();"
    for (i = 1; i <= nc; i++) printf "    null_survives(\"%s\", call_%d);\n", labels[i], i
    printf "    CHECK(%d > 0, \"no function found in remat.h\");\n", nfn
    print "    null_teardown();"
    printf "    printf(\"%d functions, %d calls (NULL arguments, dry-run sessions, extreme scalars)\\n\");\n", nfn, nc
    print "    return check_done(\"test_null_api\");\n}"
}
