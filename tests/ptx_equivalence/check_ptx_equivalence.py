#!/usr/bin/env python3
"""Fails when a kernels_cu entry stops computing what the original kernel does.

kernels_cu/ is a restructured port of the original kernels kept verbatim in
tests/third_party/onnx_runtime_ep_cuda/. The port must produce the same bits,
and the GPU tests can only sample that on the machines that have a GPU. This
check proves it without a GPU, on every CI run: both sides are compiled to PTX
the way nbits compiles them at run time (NVRTC, through the nbits_nvrtc_ptx
helper) and every ported entry must have, for every target,

  * the same floating-point instruction sequence as the original entry of the
    same name (rounding modes and ftz included), and
  * the same floating-point dataflow: every fp result and every stored value
    computed by the same expression tree (see ptx_dataflow.py), which catches
    a re-associated sum or a swapped operand that keeps the opcode sequence.

Both whole-file builds (-DNBITS_ALL_ENTRIES=1) and single-entry builds
(-DNBITS_ENTRY_<name>=1, what the runtime loads by default) are checked, and
a single-entry build must hold exactly that one entry. The check also fails
when a kernels_cu file includes a file from outside kernels_cu (a CUDA
toolkit header), which NVRTC could only find through an include directory.

--self-test instead plants numerics changes (and a toolkit include) in a
temporary copy of the kernels and asserts that the check reports each of
them: a check that cannot fail proves nothing.

Exit status: 0 equivalent (or self-test passed), 1 a difference or a failed
self-test, 2 the check could not run (bad arguments, a compile error).
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
from collections import namedtuple

sys.dont_write_bytecode = True  # CI runs it from the source tree: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptx_dataflow  # noqa: E402

DEFAULT_TARGETS = ("compute_90", "compute_80")

# Port entries whose original has another name and runs the original's
# per-element expression `repeat` times (the pointwise kernel has four code
# paths, each evaluating the reference expression once). Only the fp view is
# compared: the paths load and store with other widths than the reference.
REPEATED_ORIGINALS = {
    "matmul_nbits_silu_mul_f16": ("ref_silu_mul_f16", 4),
}

# Port entries that deliberately have no original. Every other port entry
# must pair with one, so renaming an entry cannot silently drop it from the
# check.
ENTRIES_WITHOUT_ORIGINAL = frozenset()

# kernels_cu files that hold only kernels nbits adds, which no original
# computes: their entries are not paired (the include check still covers them).
FILES_WITHOUT_ORIGINALS = frozenset(("matmul_decode.cu", "matmul_prefill.cu"))

Pairing = namedtuple("Pairing", "entry original repeat")
Pairing.__doc__ = "A port entry, the original entry it must match, and how many copies of it."

Job = namedtuple("Job", "source headers target entries output")
Job.__doc__ = "One PTX compilation: every entry when `entries` is empty."

Finding = namedtuple("Finding", "target entry kind detail")
Finding.__doc__ = """A difference. kind: "fp", "dataflow", "single-entry" or "missing"."""


class CheckError(Exception):
    """The check could not run (not: the check found a difference)."""


# --------------------------------------------------------------- sources


def declared_entries(path):
    """The `extern "C" __global__ void [__launch_bounds__(...)] name(` entries
    of a source file, as nbits' runtime finds them (jit/kernel_source.cpp),
    each once even where #if branches declare it twice."""
    with open(path, encoding="utf-8") as source:
        names = re.findall(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?([A-Za-z0-9_]+)\(',
                           source.read())
    return list(dict.fromkeys(names))


def includes_outside(directory):
    """(file, included name) for every #include under `directory` that does
    not name a file of `directory`: NVRTC gets exactly those files as named
    headers, so anything else (a toolkit header such as <cuda_fp16.h>) would
    need an include directory at run time."""
    outside = []
    for root, _, names in sorted(os.walk(directory)):
        for name in sorted(names):
            if not name.endswith((".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as source:
                for match in re.finditer(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', source.read(), re.M):
                    bracket, included = match.groups()
                    if bracket == "<" or not os.path.isfile(os.path.join(directory, included)):
                        closing = ">" if bracket == "<" else '"'
                        outside.append((os.path.relpath(path, directory), bracket + included + closing))
    return outside


def entries_by_file(directory):
    """{path: [entries]} for the *.cu files of a directory that declare any."""
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".cu") and os.path.isfile(path):
            entries = declared_entries(path)
            if entries:
                files[path] = entries
    return files


def pair_entries(port_entries, original_entries):
    """Pairs each port entry with its original. Raises CheckError for a port
    entry with neither an original nor a listed exemption."""
    repeated = sorted({e for e in port_entries if port_entries.count(e) > 1})
    if repeated:
        raise CheckError("entries declared by more than one kernels file: " + ", ".join(repeated))
    pairings, unpaired = [], []
    for entry in port_entries:
        if entry in REPEATED_ORIGINALS:
            original, repeat = REPEATED_ORIGINALS[entry]
            if original not in original_entries:
                raise CheckError("%s must match %s, which no original declares" % (entry, original))
            pairings.append(Pairing(entry, original, repeat))
        elif entry in original_entries:
            pairings.append(Pairing(entry, entry, 1))
        elif entry not in ENTRIES_WITHOUT_ORIGINAL:
            unpaired.append(entry)
    if unpaired:
        raise CheckError(
            "port entries without an original of the same name: %s. Give the entry its original's "
            "name, or list it in REPEATED_ORIGINALS or ENTRIES_WITHOUT_ORIGINAL of %s"
            % (", ".join(unpaired), os.path.basename(__file__)))
    return pairings


# --------------------------------------------------------------- compiling


class PtxCompiler:
    """Turns Jobs into PTX text, several at a time, each job at most once.

    The compiler is the nbits_nvrtc_ptx helper (nbits' own NVRTC path), or nvcc
    for a quick run without a build, given the same macros and include dir.
    """

    def __init__(self, executable, workers):
        self.executable = executable
        self.workers = workers
        self.done = {}

    def compile_all(self, jobs):
        """{job: ptx text} for all jobs. Raises CheckError on a failed compile."""
        pending = [job for job in dict.fromkeys(jobs) if job not in self.done]
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.workers) as pool:
            for job, text in zip(pending, pool.map(self._compile, pending)):
                self.done[job] = text
        return {job: self.done[job] for job in jobs}

    def _compile(self, job):
        os.makedirs(os.path.dirname(job.output), exist_ok=True)
        try:
            result = subprocess.run(self._command(job), capture_output=True, text=True)
        except OSError as error:
            raise CheckError("cannot run %s: %s" % (self.executable, error)) from error
        if result.returncode != 0:
            raise CheckError("compiling %s for %s failed:\n%s%s" % (
                job.source, job.target, result.stdout, result.stderr))
        with open(job.output, encoding="utf-8") as ptx:
            return ptx.read()

    def _command(self, job):
        if os.path.basename(self.executable).startswith("nvcc"):
            command = [self.executable, "-ptx", "-arch=" + job.target, "-std=c++17", "-o", job.output]
            command += ["-DNBITS_ENTRY_%s=1" % e for e in job.entries] or ["-DNBITS_ALL_ENTRIES=1"]
            return command + (["-I" + job.headers] if job.headers else []) + [job.source]
        command = [self.executable, "--target", job.target, "--output", job.output]
        for entry in job.entries:
            command += ["--entry", entry]
        # A port (it has named headers) is compiled as the runtime compiles it,
        # with no include directory; only the originals see the toolkit's.
        if job.headers:
            command += ["--headers", job.headers, "--no-include-dirs"]
        return command + [job.source]


def file_stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def whole_file_job(source, headers, target, output_dir, side):
    return Job(source, headers, target, (),
               os.path.join(output_dir, target, side, file_stem(source) + ".ptx"))


def single_entry_job(source, headers, target, entry, output_dir):
    return Job(source, headers, target, (entry,),
               os.path.join(output_dir, target, "single", entry + ".ptx"))


# --------------------------------------------------------------- comparing


def compare_pairing(pairing, port_body, original_body):
    """The differences (kind, detail) between a port entry and its original."""
    port = ptx_dataflow.parse_instructions(port_body)
    original = ptx_dataflow.parse_instructions(original_body)
    port_fp = ptx_dataflow.fp_view(port)
    original_fp = ptx_dataflow.fp_view(original) * pairing.repeat
    findings = []
    if port_fp != original_fp:
        findings.append(("fp", ["fp instruction sequence differs:"] +
                         ptx_dataflow.sequence_diff(original_fp, port_fp)))
    if pairing.repeat == 1:
        port_flow = ptx_dataflow.dataflow_view(port)
        original_flow = ptx_dataflow.dataflow_view(original)
        if port_flow != original_flow:
            findings.append(("dataflow", ["fp dataflow differs:"] +
                             ptx_dataflow.dataflow_diff(original_flow, port_flow)))
    return findings


def fp_count(body):
    return len(ptx_dataflow.fp_view(ptx_dataflow.parse_instructions(body)))


def merged_entries(ptx_texts):
    entries = {}
    for text in ptx_texts:
        entries.update(ptx_dataflow.extract_entries(text))
    return entries


class Check:
    """One run of the equivalence check over a kernels directory."""

    def __init__(self, compiler, kernels_dir, originals_dir, output_dir, log, original_output_dir=None):
        self.compiler = compiler
        self.kernels_dir = kernels_dir
        self.originals_dir = originals_dir
        self.output_dir = output_dir
        # Checks that share it compile each original once (see PtxCompiler).
        self.original_output_dir = original_output_dir or output_dir
        self.log = log

    def run(self, targets, only_entries=None, single_entries=True):
        """(pairings, findings) for `targets`, restricted to `only_entries` if given."""
        pairings, port_files, original_files = self._select(only_entries)
        jobs = self._jobs(targets, pairings, port_files, original_files, single_entries)
        ptx = self.compiler.compile_all(list(jobs.values()))
        findings = []
        for target in targets:
            port = merged_entries(ptx[jobs[(target, "port", f)]] for f in port_files)
            original = merged_entries(ptx[jobs[(target, "original", f)]] for f in original_files)
            for pairing in pairings:
                single = ptx[jobs[(target, "single", pairing.entry)]] if single_entries else None
                findings += self._check_entry(target, pairing, port, original, single)
        return pairings, findings

    def _select(self, only_entries):
        """The pairings to check and the port and original files they need."""
        port_files = {f: e for f, e in entries_by_file(self.kernels_dir).items()
                      if os.path.basename(f) not in FILES_WITHOUT_ORIGINALS}
        original_files = entries_by_file(self.originals_dir)
        port_entries = [e for entries in port_files.values() for e in entries]
        pairings = pair_entries(port_entries, {e for entries in original_files.values() for e in entries})
        if only_entries is not None:
            unknown = set(only_entries).difference(port_entries)
            if unknown:
                raise CheckError("%s declares no entry %s" % (self.kernels_dir, ", ".join(sorted(unknown))))
            pairings = [p for p in pairings if p.entry in only_entries]
        needed = {p.entry for p in pairings}
        needed_originals = {p.original for p in pairings}
        return (pairings,
                {f: e for f, e in port_files.items() if needed.intersection(e)},
                {f: e for f, e in original_files.items() if needed_originals.intersection(e)})

    def _jobs(self, targets, pairings, port_files, original_files, single_entries):
        """{(target, kind, file or entry): Job} for every compilation needed."""
        source_of = {e: f for f, entries in port_files.items() for e in entries}
        jobs = {}
        for target in targets:
            for source in port_files:
                jobs[(target, "port", source)] = whole_file_job(
                    source, self.kernels_dir, target, self.output_dir, "port")
            for source in original_files:
                jobs[(target, "original", source)] = whole_file_job(
                    source, None, target, self.original_output_dir, "original")
            for pairing in pairings if single_entries else ():
                jobs[(target, "single", pairing.entry)] = single_entry_job(
                    source_of[pairing.entry], self.kernels_dir, target, pairing.entry, self.output_dir)
        return jobs

    def _check_entry(self, target, pairing, port, original, single_ptx):
        """Findings for one entry on one target, and one log line for it."""
        if pairing.entry not in port:
            return self._report(target, pairing, [("missing", [
                "not in the -DNBITS_ALL_ENTRIES=1 build: check its #if guard"])])
        found = [(kind, ["whole file: " + line for line in detail])
                 for kind, detail in compare_pairing(pairing, port[pairing.entry], original[pairing.original])]
        if single_ptx is not None:
            names = ptx_dataflow.entry_names(single_ptx)
            if names != [pairing.entry]:
                found.append(("single-entry", [
                    "-DNBITS_ENTRY_%s=1 build holds entries %s, not exactly that one: check the #if guards"
                    % (pairing.entry, names)]))
            if pairing.entry in names:
                body = ptx_dataflow.extract_entries(single_ptx)[pairing.entry]
                found += [(kind, ["single-entry build: " + line for line in detail])
                          for kind, detail in compare_pairing(pairing, body, original[pairing.original])]
        return self._report(target, pairing, found, fp_count(port[pairing.entry]))

    def _report(self, target, pairing, found, ops=None):
        against = "" if pairing.repeat == 1 else " = %d x %s" % (pairing.repeat, pairing.original)
        if not found:
            self.log("%-11s %-52s ok (%d fp ops%s)" % (target, pairing.entry, ops, against))
        for kind, detail in found:
            self.log("%-11s %-52s %s MISMATCH" % (target, pairing.entry, kind.upper()))
            for line in detail:
                self.log("    " + line)
        return [Finding(target, pairing.entry, kind, detail) for kind, detail in found]


# --------------------------------------------------------------- self-test

Mutation = namedtuple("Mutation", "name path old new entry caught_by fp_unchanged")
Mutation.__doc__ = """A planted change to a copy of kernels_cu.

path          file relative to the kernels dir; `old` must occur in it once.
entry         the entry the check must then flag, with kind `caught_by`.
fp_unchanged  the change keeps the fp opcode sequence, so only the dataflow
              view can see it: the fp view must not report it.
"""

MUTATIONS = (
    Mutation("re-associate an fp32 sum", "nbits/int4_f16.cuh",
             "    value += v1.x;\n    value += v2.x;\n",
             "    value += v2.x;\n    value += v1.x;\n",
             "matmul_nbits_gemv_f16_scales_f16", "dataflow", True),
    Mutation("re-pair a sum of squares", "nbits/rmsnorm_f16.cuh",
             "float ss = (ss0 + ss1) + (ss2 + ss3);",
             "float ss = (ss0 + ss2) + (ss1 + ss3);",
             "matmul_nbits_rmsnorm_f16_warp_half4", "dataflow", True),
    Mutation("use rsqrtf for 1 / sqrtf", "nbits/rmsnorm_f16.cuh",
             "return 1.0f / sqrtf(sum_of_squares / (float)size + epsilon);",
             "return rsqrtf(sum_of_squares / (float)size + epsilon);",
             "matmul_nbits_rmsnorm_f16_warp_half4", "fp", False),
    Mutation("add instead of multiply in silu(a) * b", "pointwise.cu",
             "__float2half_rn(__fmul_rn(gate_up_silu_f32(__half2float(a)), __half2float(b)))",
             "__float2half_rn(__fadd_rn(gate_up_silu_f32(__half2float(a)), __half2float(b)))",
             "matmul_nbits_silu_mul_f16", "fp", False),
    Mutation("leave an entry unguarded", "gemv_f32.cu",
             "#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f32\n",
             "#if 1\n",
             "matmul_nbits_gemv_f32", "single-entry", False),
)


def plant(mutation, kernels_dir, copy_dir):
    """Copies the kernels to `copy_dir` with `mutation` applied."""
    shutil.rmtree(copy_dir, ignore_errors=True)
    shutil.copytree(kernels_dir, copy_dir)
    path = os.path.join(copy_dir, mutation.path)
    with open(path, encoding="utf-8") as source:
        text = source.read()
    if text.count(mutation.old) != 1:
        raise CheckError("self-test mutation %r: its text occurs %d times in %s, not once; update MUTATIONS "
                         "to the current kernel source" % (mutation.name, text.count(mutation.old), mutation.path))
    with open(path, "w", encoding="utf-8") as source:
        source.write(text.replace(mutation.old, mutation.new))


def self_test_verdict(mutation, findings):
    """None when the check caught `mutation` as expected, else why not."""
    kinds = {f.kind for f in findings if f.entry == mutation.entry}
    if mutation.caught_by not in kinds:
        return "not caught: %s reported no %s mismatch (reported: %s)" % (
            mutation.entry, mutation.caught_by, sorted(kinds) or "nothing")
    if mutation.fp_unchanged and "fp" in kinds:
        return "the fp view changed, so this mutation no longer exercises the dataflow view"
    return None


def run_self_test(compiler, args, log):
    """Baseline must pass, then every mutation must be caught. True if so."""
    def quiet(line):
        del line  # the per-entry lines of the planted copies are noise here

    entries = {m.entry for m in MUTATIONS}
    target = args.targets[0]
    root = os.path.join(args.output, "self_test")
    baseline_dir = os.path.join(root, "baseline", "kernels_cu")
    shutil.rmtree(baseline_dir, ignore_errors=True)
    shutil.copytree(args.kernels, baseline_dir)
    check = Check(compiler, baseline_dir, args.originals, os.path.join(root, "baseline", "ptx"), quiet, root)
    _, findings = check.run([target], entries)
    if findings:
        log("self-test: the unmodified copy already fails, so mutations prove nothing:")
        for finding in findings:
            log("    %s %s %s" % (finding.entry, finding.kind, "; ".join(finding.detail)))
        return False
    log("self-test: unmodified copy passes for %s (%s)" % (", ".join(sorted(entries)), target))

    passed = True
    for index, mutation in enumerate(MUTATIONS):
        mutation_root = os.path.join(root, "mutation_%d" % index)
        plant(mutation, args.kernels, os.path.join(mutation_root, "kernels_cu"))
        check = Check(compiler, os.path.join(mutation_root, "kernels_cu"), args.originals,
                      os.path.join(mutation_root, "ptx"), quiet, root)
        _, findings = check.run([target], {mutation.entry})
        verdict = self_test_verdict(mutation, findings)
        passed = passed and verdict is None
        log("self-test: %-42s %s" % (mutation.name, "caught (%s mismatch in %s)" % (
            mutation.caught_by, mutation.entry) if verdict is None else "FAILED: " + verdict))
    return include_self_test(args, root, log) and passed


# A toolkit include planted into a copy of kernels_cu: no entry's PTX changes,
# includes_outside must report it.
PLANTED_INCLUDE = Mutation("include a toolkit header", "pointwise.cu", '#include "nbits/half.cuh"\n',
                           "#include <cuda_fp16.h>\n", None, None, False)


def include_self_test(args, root, log):
    """The unmodified kernels include only their own headers, and a planted
    toolkit include is reported. True if so."""
    if includes_outside(args.kernels):
        log("self-test: the unmodified kernels already include files from outside %s" % args.kernels)
        return False
    copy_dir = os.path.join(root, "planted_include", "kernels_cu")
    plant(PLANTED_INCLUDE, args.kernels, copy_dir)
    caught = (PLANTED_INCLUDE.path, "<cuda_fp16.h>") in includes_outside(copy_dir)
    log("self-test: %-42s %s" % (PLANTED_INCLUDE.name, "caught (include in %s)" % PLANTED_INCLUDE.path
                                 if caught else "FAILED: not reported by includes_outside"))
    return caught


# --------------------------------------------------------------- main


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", required=True, help="the port's kernels_cu directory")
    parser.add_argument("--originals", required=True, help="directory of the original kernel sources")
    parser.add_argument("--compiler", required=True,
                        help="the nbits_nvrtc_ptx helper (or nvcc, for a run without a build)")
    parser.add_argument("--output", required=True, help="directory for the PTX files (kept for inspection)")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help="comma-separated virtual architectures (default: %(default)s)")
    parser.add_argument("--entries", help="comma-separated port entries to check (default: all)")
    parser.add_argument("--no-single-entry", action="store_true",
                        help="skip the -DNBITS_ENTRY_<name>=1 builds")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compilations")
    parser.add_argument("--self-test", action="store_true",
                        help="check that planted numerics changes are reported, instead of checking")
    args = parser.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    for directory in (args.kernels, args.originals):
        if not os.path.isdir(directory):
            parser.error("%s is not a directory" % directory)
    return args


def run_check(compiler, args, log):
    """The equivalence check proper. True if every entry matches and the
    kernels include no file from outside their directory."""
    outside = includes_outside(args.kernels)
    for path, included in outside:
        log("%s includes %s, which is not a kernels file: NVRTC would need the CUDA toolkit's include "
            "directory at run time (fp16 and bf16 come from nbits/half.cuh)" % (path, included))
    only = set(args.entries.split(",")) if args.entries else None
    check = Check(compiler, args.kernels, args.originals, args.output, log)
    pairings, findings = check.run(args.targets, only, not args.no_single_entry)
    if not pairings:
        raise CheckError("no entry to check")
    if findings:
        log("\n%d mismatch(es) in %s: a kernel change moved the numerics away from the original "
            "kernels (or the guards of single-entry builds are wrong)." % (
                len(findings), ", ".join(sorted({f.entry for f in findings}))))
        return False
    log("\n%d entries equivalent to the originals on %s (whole-file%s builds)." % (
        len(pairings), ", ".join(args.targets), "" if args.no_single_entry else " and single-entry"))
    if outside:
        log("%d include(s) of files outside %s." % (len(outside), args.kernels))
        return False
    log("No kernels file includes a file from outside %s." % args.kernels)
    return True


def main(argv):
    args = parse_arguments(argv)
    compiler = PtxCompiler(args.compiler, args.jobs)
    def log(line):
        print(line, flush=True)

    try:
        passed = run_self_test(compiler, args, log) if args.self_test else run_check(compiler, args, log)
    except CheckError as error:
        print("check_ptx_equivalence: " + str(error), file=sys.stderr)
        return 2
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
