"""Building candidate extensions with fixed flags.

Two candidate formats (DESIGN.md §4):
  kernelbench  model_new.py calls torch.utils.cpp_extension.load_inline; the
               harness replaces load_inline with `load_inline` below, which builds
               with the judge's flags and a precompiled torch header.
  workspace    model_new.py imports `cuda_extension`, built from kernels/*.cu
               (cuda) or kernels/*.cpp (cpu) plus kernels/*_binding.cpp and the
               fixed files in workspace/.
"""
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_DIR = os.path.join(HERE, "workspace")
SHIM_DIR = os.path.join(HERE, "include")  # the judge's torch/extension.h
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
EXTENSION_NAME = "cuda_extension"

# Flags a candidate may add through extra_cflags / extra_cuda_cflags.
_SAFE_FLAG = re.compile(
    r"^(-O[0-3s]|-D[A-Za-z_]\w*(=[\w.+-]*)?|-U[A-Za-z_]\w*|-std=c\+\+(14|17|20)|"
    r"-f(no-)?(fast-math|unroll-loops|openmp|strict-aliasing|tree-vectorize|omit-frame-pointer)|"
    r"-march=[\w-]+|-mtune=[\w-]+|-m(avx\w*|fma|f16c|bmi2?)|--?use_fast_math|-lineinfo|-w|-g|"
    r"--expt-relaxed-constexpr|--expt-extended-lambda|--?maxrregcount=\d+|"
    r"-Xptxas=?-?[\w,=]+|--ptxas-options=-?[\w,=]+|-ftz=\w+|-prec-div=\w+|-prec-sqrt=\w+|-fmad=\w+|"
    r"--extra-device-vectorization|-gencode=arch=compute_\d+a?,code=sm_\d+a?|-arch=sm_\d+a?)$")


class BuildError(Exception):
    """A candidate's sources failed to build; the message is the compiler output."""


def _torch_root():
    spec = importlib.util.find_spec("torch")  # located, not imported: importing torch costs ~2 s
    return os.path.dirname(spec.origin)


def _torch_dirs():
    """(include dirs, lib dir, version) of torch, read from its files."""
    root = _torch_root()
    with open(os.path.join(root, "version.py")) as f:
        version = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", f.read(), re.M).group(1)
    includes = [os.path.join(root, "include"), os.path.join(root, "include", "torch", "csrc", "api", "include")]
    return includes, os.path.join(root, "lib"), version


def _common_nvcc_flags():
    """torch.utils.cpp_extension.COMMON_NVCC_FLAGS, read from its source."""
    import ast
    with open(os.path.join(_torch_root(), "utils", "cpp_extension.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMMON_NVCC_FLAGS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    import torch.utils.cpp_extension as ce  # the source changed shape: ask torch itself
    return list(ce.COMMON_NVCC_FLAGS)


def _cxx_version():
    try:
        return subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def cxx_flags(spec):
    """Flags of every g++ compile that includes torch headers (and of the PCH)."""
    includes, _, _ = _torch_dirs()
    flags = list(spec["cxx_flags"]) + ["-fPIC", "-std=c++17", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=1",
                                       "-DTORCH_API_INCLUDE_EXTENSION_H", "-I", SHIM_DIR]
    for inc in includes + [sysconfig.get_paths()["include"]]:
        flags += ["-isystem", inc]
    if spec["backend"] == "cuda":
        flags += ["-isystem", os.path.join(CUDA_HOME, "include")]
    return flags


def nvcc_flags(spec):
    includes, _, _ = _torch_dirs()
    arch = spec.get("cuda_arch") or "sm_90"
    num = arch.replace("sm_", "")
    flags = list(spec["nvcc_flags"]) + ["-gencode=arch=compute_%s,code=sm_%s" % (num, num)]
    flags += _common_nvcc_flags() + ["-Xcompiler", "-fPIC", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1",
                                           "-DTORCH_API_INCLUDE_EXTENSION_H", "-I", SHIM_DIR]
    for inc in includes + [sysconfig.get_paths()["include"]]:
        flags += ["-isystem", inc]
    return flags


def link_flags(spec, extra_libs=()):
    _, libdir, _ = _torch_dirs()
    flags = ["-shared", "-fopenmp", "-L" + libdir, "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
             "-Wl,-rpath," + libdir]
    if spec["backend"] == "cuda":
        flags += ["-lc10_cuda", "-ltorch_cuda", "-L" + os.path.join(CUDA_HOME, "lib64"), "-lcudart"]
        flags += ["-l" + lib for lib in list(spec["link_libraries"]) + list(extra_libs)]
    return flags


def pch_dir(spec):
    """The precompiled-header directory for these flags, torch and compiler."""
    _, _, torch_version = _torch_dirs()
    key = hashlib.sha256(("\0".join(cxx_flags(spec)) + torch_version + _cxx_version()).encode()).hexdigest()[:16]
    return os.path.join(spec["pch_root"], key)


def build_pch(spec):
    """Builds <pch_dir>/torch_extension.h.gch once; DONE marks a finished build.
    Concurrent judges serialise on a lock file, so the header is built once."""
    import fcntl
    out = pch_dir(spec)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(out, "DONE")):
            return {"ok": True, "path": out, "seconds": 0.0, "log": "cached"}
        header = os.path.join(out, "torch_extension.h")
        with open(header, "w") as f:
            f.write("#include <torch/extension.h>\n")
        start = time.time()
        tmp = header + ".gch.tmp"
        cmd = ["g++"] + cxx_flags(spec) + ["-x", "c++-header", header, "-o", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"ok": False, "path": out, "seconds": time.time() - start, "log": proc.stdout + proc.stderr}
        os.rename(tmp, header + ".gch")
        with open(os.path.join(out, "DONE"), "w") as f:
            f.write("ok\n")
        return {"ok": True, "path": out, "seconds": time.time() - start, "log": ""}


class _Builder:
    """Compiles sources to objects in parallel and links one module."""

    def __init__(self, spec, log):
        self.spec = spec
        self.log = log
        pch = pch_dir(spec)
        self.pch = os.path.join(pch, "torch_extension.h") if os.path.exists(os.path.join(pch, "DONE")) else None
        self.commands = []

    def _run_all(self, jobs):
        procs = []
        for cmd in jobs:
            self.commands.append(" ".join(cmd))
            procs.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        failed = []
        for cmd, p in procs:
            output, _ = p.communicate()
            if output:
                self.log.append(output)
            if p.returncode != 0:
                failed.append(os.path.basename(cmd[-1]))
        if failed:
            raise BuildError("".join(self.log) or ("build of %s failed" % ", ".join(failed)))

    def build(self, out_so, torch_cpp, plain_cpp, cu, include_dirs, extra_cflags=(), extra_cuda=(), extra_libs=()):
        objs, jobs = [], []
        inc = []
        for d in include_dirs:
            inc += ["-I", d]
        base = cxx_flags(self.spec) + inc + list(extra_cflags)
        for src in torch_cpp:
            obj = src + ".o"
            pch = ["-include", self.pch, "-Winvalid-pch"] if self.pch else []
            jobs.append(["g++"] + base + pch + ["-c", "-o", obj, src])
            objs.append(obj)
        for src in plain_cpp:
            obj = src + ".o"
            jobs.append(["g++"] + list(self.spec["cxx_flags"]) + ["-fPIC", "-std=c++17", "-fopenmp"] + inc +
                        list(extra_cflags) + ["-c", "-o", obj, src])
            objs.append(obj)
        for src in cu:
            obj = src + ".o"
            jobs.append([os.path.join(CUDA_HOME, "bin", "nvcc")] + nvcc_flags(self.spec) + inc + list(extra_cuda) +
                        ["-c", "-o", obj, src])
            objs.append(obj)
        self._run_all(jobs)
        self._run_all([["g++"] + objs + link_flags(self.spec, extra_libs) + ["-o", out_so]])


def _filter_flags(flags, log):
    kept = []
    for f in flags or []:
        if _SAFE_FLAG.match(f) and "plugin" not in f:
            kept.append(f)
        else:
            log.append("ignored flag %r (not on the judge's allow-list)\n" % f)
    return kept


def _load_module(name, so_path):
    loader = importlib.machinery.ExtensionFileLoader(name, so_path)
    spec = importlib.util.spec_from_file_location(name, so_path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def install_load_inline(spec, allow_build):
    """Replaces torch.utils.cpp_extension.load_inline (and load) for candidates."""
    import torch.utils.cpp_extension as ce
    build_dir = spec["build_dir"]
    build_log = []
    spec_for_build = spec

    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                    extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
                    verbose=False, with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                    keep_intermediates=True, use_pch=False, **kwargs):
        if not re.match(r"^[A-Za-z_]\w*$", str(name)):
            raise BuildError("extension name %r is not an identifier" % (name,))
        cpp = cpp_sources if isinstance(cpp_sources, str) else "\n".join(cpp_sources or [])
        cuda = cuda_sources if isinstance(cuda_sources, str) else "\n".join(cuda_sources or [])
        if cuda and spec_for_build["backend"] != "cuda":
            raise BuildError("cuda_sources given, but the judge's backend is %s" % spec_for_build["backend"])
        if isinstance(functions, str):
            functions = [functions]
        log = []
        cflags = _filter_flags(extra_cflags, log)
        cuflags = _filter_flags(extra_cuda_cflags, log)
        libs = []
        for f in extra_ldflags or []:
            lib = f[2:] if f.startswith("-l") else None
            if lib in list(spec_for_build["link_libraries"]) + ["cublasLt"]:
                libs.append(lib)
            else:
                log.append("ignored link flag %r\n" % f)
        source = "#define TORCH_EXTENSION_NAME %s\n#include <torch/extension.h>\n%s\n" % (name, cpp)
        if functions:
            source += "PYBIND11_MODULE(%s, m) {\n" % name
            for fn in functions:
                source += '  m.def("%s", &%s, "%s");\n' % (fn, fn, fn)
            source += "}\n"
        cuda_source = ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + cuda) if cuda else ""
        key = hashlib.sha256("\0".join([name, source, cuda_source] + cflags + cuflags + libs).encode()).hexdigest()[:16]
        out_dir = os.path.join(build_dir, "%s_%s" % (name, key))
        so_path = os.path.join(out_dir, name + ".so")
        if not os.path.exists(so_path):
            if not allow_build:
                raise BuildError("extension %s was not built by the compile step" % name)
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "main.cpp"), "w") as f:
                f.write(source)
            cu = []
            if cuda_source:
                with open(os.path.join(out_dir, "cuda.cu"), "w") as f:
                    f.write(cuda_source)
                cu = [os.path.join(out_dir, "cuda.cu")]
            builder = _Builder(spec_for_build, log)
            builder.build(so_path + ".tmp.so", [os.path.join(out_dir, "main.cpp")], [], cu, [], cflags, cuflags, libs)
            os.rename(so_path + ".tmp.so", so_path)
            build_log.extend(builder.commands)
        build_log.extend(log)
        return _load_module(name, so_path)

    def load(*args, **kwargs):
        raise BuildError("torch.utils.cpp_extension.load is not supported; use load_inline or the workspace format")

    ce.load_inline = load_inline
    ce.load = load
    return build_log


def _build_workspace(spec, log):
    src_dir = os.path.join(spec["candidate_dir"], "kernels")
    stage = os.path.join(spec["build_dir"], "src")
    os.makedirs(stage, exist_ok=True)
    for path in glob.glob(os.path.join(src_dir, "*")):
        if os.path.isfile(path) and os.path.splitext(path)[1] in (".cu", ".cuh", ".cpp", ".h", ".hpp"):
            shutil.copy(path, stage)
    for fixed in ("binding_registry.h", "ext_main.cpp"):  # fixed files always win
        shutil.copy(os.path.join(FIXED_DIR, fixed), os.path.join(stage, fixed))
    files = sorted(os.listdir(stage))
    bindings = [os.path.join(stage, f) for f in files if f.endswith("_binding.cpp")]
    if not bindings:
        raise BuildError("the workspace has no kernels/*_binding.cpp")
    plain = [os.path.join(stage, f) for f in files if f.endswith(".cpp") and not f.endswith("_binding.cpp")
             and f != "ext_main.cpp"]
    cu = [os.path.join(stage, f) for f in files if f.endswith(".cu")]
    if cu and spec["backend"] != "cuda":
        raise BuildError("kernels/*.cu given, but the judge's backend is %s" % spec["backend"])
    builder = _Builder(spec, log)
    builder.build(os.path.join(spec["build_dir"], EXTENSION_NAME + ".so"), bindings + [os.path.join(stage, "ext_main.cpp")],
                  plain, cu, [stage])
    return builder.commands


def compile_candidate(spec):
    """Builds the candidate. Returns {ok, stage, log, seconds, commands}."""
    start = time.time()
    log = []
    try:
        if spec["candidate_kind"] == "workspace":
            commands = _build_workspace(spec, log)
        else:
            commands = install_load_inline(spec, allow_build=True)
            mod_spec = importlib.util.spec_from_file_location("model_new", spec["candidate_module"])
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules["model_new"] = module
            mod_spec.loader.exec_module(module)
    except BuildError as e:
        return {"ok": False, "stage": "compile", "log": str(e), "seconds": time.time() - start, "commands": []}
    except BaseException as e:  # noqa: BLE001 - an import-time failure of candidate code
        import traceback
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return {"ok": False, "stage": "import", "log": text[-8000:], "seconds": time.time() - start, "commands": []}
    return {"ok": True, "stage": "compile", "log": "".join(log), "seconds": time.time() - start,
            "commands": commands}
