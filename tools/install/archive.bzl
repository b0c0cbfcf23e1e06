"""One static archive of a cc_library and every library of this repository it depends on."""

def _merged_archive_impl(ctx):
    archives = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            for lib in linker_input.libraries:
                a = lib.pic_static_library or lib.static_library
                # Only this repository's code: system libraries (Abseil, DPDK,
                # rdma-core, ...) come from Debian and are named in the .pc file.
                if a != None and a.owner != None and a.owner.workspace_name == "" and a not in archives:
                    archives.append(a)
    out = ctx.actions.declare_file(ctx.attr.out)
    script = "CREATE {}\n".format(out.path)
    for a in archives:
        script += "ADDLIB {}\n".format(a.path)
    script += "SAVE\nEND\n"
    ctx.actions.run_shell(
        inputs = archives,
        outputs = [out],
        command = "printf '%s' \"$1\" | ar -M",
        arguments = [script],
        mnemonic = "MergeArchives",
        progress_message = "Merging %d archives into %s" % (len(archives), out.short_path),
    )
    return [DefaultInfo(files = depset([out]))]

merged_archive = rule(
    implementation = _merged_archive_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "out": attr.string(mandatory = True),
    },
)
