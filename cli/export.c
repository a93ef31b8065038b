/* export.c: `remat export --load FILE`: a file of `remat train` written for
 * other programs. --merge-lora --out PATH: the model with its LoRA
 * adapters merged into the weights (rm_save_merged), the file's metadata
 * kept but for LoRA's keys, so remat sample, --init and Hugging Face
 * loaders take it as a plain model. --adapters DIR: the adapters alone as
 * a PEFT folder (rm_save_adapters), base_model_name_or_path from
 * --base-model. */
#include "args.h"
#include "paths.h"
#include <stdio.h>
#include <string.h>

/* The source file's metadata less what described the adapters and what
 * was frozen around them (the merged model is a plain one, to fine-tune
 * anew), and the checksum and optimizer count, which belong to the source. */
static int kept_meta(const rm_file *f, const char **k, const char **v, int cap) {
    int n = 0;
    for (int i = 0; i < rm_file_meta_count(f) && n < cap; i++) {
        const char *key = rm_file_meta_key(f, i);
        if (strncmp(key, "lora_", 5) == 0 || strcmp(key, "freeze") == 0 || strcmp(key, "train_only") == 0 ||
            strcmp(key, "remat_checksum") == 0 || strcmp(key, "optimizer_updates") == 0)
            continue;
        k[n] = key, v[n++] = rm_file_meta_value(f, i);
    }
    return n;
}

/* The run's model, its weights loaded from f (forward only, one row). */
static int load_model(const cli_args *a, rm_file *f, rm_run_info *r, rm_graph **g, rm_session **s) {
    char err[512];
    rm_model_io io;
    if (rm_file_run_info(f, r, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    r->batch = 1, r->dropout = 0.0f;
    if (!(*g = rm_graph_new()) || rm_run_build(r, *g, &io, 0) != RM_OK)
        return cli_fail(1, "'%s': %s", a->load, rm_graph_errmsg(*g));
    if (rm_file_check(f, *g, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    rm_file_mark_loaded(f, *g, NULL); /* rm_load_params writes them: not drawn */
    rm_options o;
    rm_options_default(&o);
    o.threads = a->threads;
    o.forward_only = 1;
    if (rm_compile(*g, &o, s) != RM_OK) return cli_fail(1, "%s", rm_graph_errmsg(*g));
    if (rm_load_params(*s, a->load, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    return 0;
}

int cli_export(const cli_args *a) {
    if (!a->load) return cli_fail(2, "export needs --load FILE (a file of remat train --save)");
    if (!a->merge_lora && !a->adapters)
        return cli_fail(2, "export needs --merge-lora --out FILE and/or --adapters DIR (see remat export --help)");
    if (a->merge_lora != (a->out != NULL))
        return cli_fail(2, "--merge-lora and --out FILE go together: the merged model is written to --out");
    if (a->base_model && !*a->base_model)
        return cli_fail(2, "--base-model needs a name (the base model's Hugging Face id or folder), got ''");
    if (a->base_model && !a->adapters)
        return cli_fail(2, "--base-model names the base model in the adapter_config.json of --adapters DIR: add "
                        "--adapters DIR, or drop --base-model");
    /* before loading anything: the outputs writable, none the input or each other */
    char adapter_paths[2][PATH_MAX + 64];
    cli_file files[6] = {{"--load", a->load, CLI_IN, NULL, 0}, {"--out", a->out, CLI_OUT, NULL, 0},
                         {"--base-model", a->base_model, CLI_MODEL_DIR, NULL, 0}};
    cli_adapter_files("--adapters", a->adapters, adapter_paths, files + 3);
    int checked = cli_check_files(files, 6, a->new_in_model_folder);
    if (checked) return checked;
    char err[512];
    rm_file *f = NULL;
    rm_graph *g = NULL;
    rm_session *s = NULL;
    rm_run_info r;
    int rc = rm_file_open(a->load, &f, err, sizeof err) != RM_OK ? cli_fail(1, "%s", err) : 0;
    if (!rc) rc = load_model(a, f, &r, &g, &s);
    if (!rc && r.lora.rank == 0)
        rc = cli_fail(1, "'%s' holds no LoRA adapters (it was not trained with --lora): nothing to merge or export",
                      a->load);
    if (!rc && a->merge_lora) {
        const char *k[128], *v[128];
        int n = kept_meta(f, k, v, 128);
        if (rm_save_merged(s, a->out, n, k, v, err, sizeof err) != RM_OK) rc = cli_fail(1, "%s", err);
        else printf("wrote %s: the model with its adapters merged\n", a->out);
    }
    const int conv1d = strcmp(r.model, "gpt") == 0; /* Hugging Face's GPT-2 stores Conv1D weights (IN, OUT) */
    if (!rc && a->adapters) {
        if (rm_save_adapters(s, a->adapters, a->base_model, conv1d, err, sizeof err) != RM_OK)
            rc = cli_fail(1, "%s", err);
        else printf("wrote %s/adapter_model.safetensors and adapter_config.json\n", a->adapters);
    }
    rm_session_free(s);
    rm_graph_free(g);
    rm_file_close(f);
    return rc;
}
