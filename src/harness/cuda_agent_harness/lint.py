"""Static rules on candidate sources (no torch import, no candidate code run).

Python (model_new.py) is checked on its syntax tree; C++/CUDA sources, both
files and the source strings handed to load_inline, with token rules. The
rules close the doors that run-time checks cannot: reaching into the harness
or torch internals, monkeypatching, processes, files, sockets, exits, and the
common ways of calling PyTorch compute instead of writing a kernel.
"""
import ast
import os
import re

ALLOWED_IMPORTS = {"torch", "torch.nn", "torch.nn.functional", "torch.utils", "torch.utils.cpp_extension",
                   "math", "typing",
                   "numbers", "cuda_extension", "__future__"}
FORBIDDEN_NAMES = {"__import__", "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals",
                   "locals", "vars", "breakpoint", "input", "__builtins__", "memoryview", "exit", "quit"}
FORBIDDEN_ATTRS = {"_C", "_python_dispatch", "_dynamo", "_inductor", "overrides", "_ops", "testing", "library",
                   "profiler", "jit", "compile", "Event", "_jit_internal", "fx", "_subclasses", "_prims",
                   "_refs", "_decomp", "func", "autograd", "nn.functional", "functional", "utils._python_dispatch",
                   "set_grad_enabled", "manual_seed", "seed", "random", "Generator", "get_rng_state",
                   "set_rng_state", "_set_torch_function_mode", "DisableTorchFunction", "hub", "multiprocessing",
                   "distributed", "backends", "ops", "export", "save", "load"}
# torch.<name>(...) calls allowed in ModelNew: allocation and shape helpers only.
ALLOWED_TORCH_CALLS = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                       "full_like", "tensor", "Size", "device", "is_tensor", "numel", "finfo", "iinfo"}
TORCH_ALIASES = {"torch", "nn", "F"}

# Free functions for processes, files, signals, sockets, clocks and device control.
CPP_FORBIDDEN_CALLS = re.compile(
    r"(\.|->)?\s*((?:\w+\s*::\s*)*)\b(fork|vfork|execl|execlp|execle|execv|execve|execvp|execvpe|system|popen|"
    r"posix_spawn\w*|dlopen|dlsym|ptrace|syscall|socket|connect|bind|listen|accept|kill|raise|signal|sigaction|"
    r"atexit|at_quick_exit|_exit|_Exit|exit|quick_exit|abort|pthread_create|pthread_kill|fopen|freopen|open|"
    r"openat|creat|write|pwrite|unlink|remove|rename|getenv|setenv|putenv|mmap|mprotect|dup|dup2|close|"
    r"clock_gettime|gettimeofday|cudaEventElapsedTime|cudaDeviceReset|cudaSetDevice|cudaProfilerStart|"
    r"cudaProfilerStop)\s*\(")
# std:: algorithms that share a name with a forbidden call.
STD_ALLOWED = {"remove", "bind"}
CPP_FORBIDDEN = [
    (re.compile(r"std\s*::\s*(thread|jthread|async|system|exit|quick_exit|abort|ofstream|fstream|filesystem)\b"),
     "threads, files or exits from the standard library"),
    (re.compile(r"#\s*include\s*[<\"](thread|future|unistd\.h|sys/[\w/]+\.h|dlfcn\.h|signal\.h|csignal|fstream|"
                r"filesystem|spawn\.h|pthread\.h|ATen/native/[\w/.]+|torch/csrc/autograd/[\w/.]+|"
                r"torch/csrc/jit/[\w/.]+|c10/core/impl/[\w/.]+|Python\.h|pybind11/embed\.h)[>\"]"),
     "headers for threads, processes, files or torch internals"),
    (re.compile(r"\b(RecordFunction|addGlobalCallback|clearCallbacks|removeCallback|c10::impl::|"
                r"DispatchKey|Dispatcher|PythonTLSSnapshot|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|"
                r"AutoDispatchBelow\w*|py::module_?::import|pybind11::module_?::import|PyRun_\w+|PyImport_\w+|"
                r"PyEval_\w+)\b"),
     "dispatcher or Python interpreter internals"),
]
# at::/torch:: names a candidate's C++ may use: types, allocation, streams, handles.
CPP_ALLOWED_TORCH = {
    "Tensor", "TensorOptions", "ScalarType", "Scalar", "Device", "DeviceType", "IntArrayRef", "Half", "BFloat16",
    "Layout", "MemoryFormat", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "full",
    "kFloat", "kFloat32", "kHalf", "kFloat16", "kBFloat16", "kDouble", "kFloat64", "kInt", "kInt32", "kLong",
    "kInt64", "kShort", "kByte", "kChar", "kBool", "kInt8", "kUInt8", "kCUDA", "kCPU", "kStrided", "cuda",
    "dtype", "device", "TensorAccessor", "PackedTensorAccessor32", "PackedTensorAccessor64", "RestrictPtrTraits",
    "DefaultPtrTraits", "OptionalCUDAGuard", "CUDAGuard", "getCurrentCUDAStream", "getCurrentCUDABlasHandle",
    "getCurrentCUDABlasLtHandle", "getCurrentCUDASolverDnHandle", "CUDAStream", "Generator", "detail",
    "native", "TensorBase", "optional", "nullopt", "ArrayRef", "SmallVector", "Contiguous", "ChannelsLast",
    "acc_type", "opmath_type", "ceil_div", "irange", "elementSize", "toString", "str",
}
CPP_TORCH_CALL = re.compile(r"\b(at|torch|c10)\s*::\s*(?:(cuda|nn|native|detail|functional)\s*::\s*)*(\w+)")


def _line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def lint_cpp(text, origin, base_line=0):
    violations = []
    for m in CPP_FORBIDDEN_CALLS.finditer(text):
        member, prefix, name = m.group(1), re.sub(r"\s", "", m.group(2)), m.group(3)
        if member or (prefix == "std::" and name in STD_ALLOWED):
            continue
        violations.append({"file": origin, "line": base_line + _line_of(text, m.start(3)), "rule": "cpp",
                           "message": "forbidden process, file, signal, socket, clock or device call: %s%s"
                                      % (prefix, name)})
    for rx, what in CPP_FORBIDDEN:
        for m in rx.finditer(text):
            violations.append({"file": origin, "line": base_line + _line_of(text, m.start()), "rule": "cpp",
                               "message": "forbidden %s: %s" % (what, m.group(0).strip())})
    for m in CPP_TORCH_CALL.finditer(text):
        ns, sub, name = m.group(1), m.group(2), m.group(3)
        if sub == "native":
            violations.append({"file": origin, "line": base_line + _line_of(text, m.start()), "rule": "torch-cpp",
                               "message": "forbidden ATen native call %s" % m.group(0)})
        elif sub in ("nn", "functional") or (name not in CPP_ALLOWED_TORCH and not name[0].isupper()):
            violations.append({"file": origin, "line": base_line + _line_of(text, m.start()), "rule": "torch-cpp",
                               "message": "PyTorch compute from C++ is forbidden: %s" % m.group(0)})
    return violations


class _PyLinter(ast.NodeVisitor):
    def __init__(self, origin):
        self.origin = origin
        self.violations = []
        self.cpp_strings = []
        self.in_model_new = False
        self.module_aliases = set()

    def flag(self, node, rule, message):
        self.violations.append({"file": self.origin, "line": getattr(node, "lineno", 0), "rule": rule,
                                "message": message})

    def visit_Import(self, node):
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                self.flag(node, "import", "import of %s is not allowed" % alias.name)
            self.module_aliases.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        if node.level or mod not in ALLOWED_IMPORTS:
            self.flag(node, "import", "import from %s is not allowed" % (mod or "."))
        for alias in node.names:
            self.module_aliases.add(alias.asname or alias.name)

    def visit_Name(self, node):
        if node.id in FORBIDDEN_NAMES:
            self.flag(node, "builtin", "use of %s is not allowed" % node.id)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ("__init__", "__name__"):
            self.flag(node, "introspection", "dunder attribute %s is not allowed" % node.attr)
        elif node.attr in FORBIDDEN_ATTRS:
            self.flag(node, "attribute", "attribute %s is not allowed" % node.attr)
        self.generic_visit(node)

    def visit_Try(self, node):
        self.flag(node, "try", "try/except is not allowed (no fallback paths)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node):
        self.flag(node, "global", "global/nonlocal state is not allowed")

    visit_Nonlocal = visit_Global

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            self.flag(node, "torch-compute", "the @ operator is PyTorch compute")
        self.generic_visit(node)

    def _check_assign_target(self, target):
        # module.attr = ... (monkeypatching) is forbidden; self.x = ... is fine.
        base = target
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(target, ast.Attribute) and isinstance(base, ast.Name) and base.id != "self":
            self.flag(target, "monkeypatch", "assignment to %s is not allowed" % ast.unparse(target))

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_assign_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_assign_target(node.target)
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        if node.name == "ModelNew":
            for base in node.bases:
                text = ast.unparse(base)
                if text not in ("nn.Module", "torch.nn.Module", "Module"):
                    self.flag(node, "subclass", "ModelNew must subclass nn.Module, not %s" % text)
            prev, self.in_model_new = self.in_model_new, True
            self.generic_visit(node)
            self.in_model_new = prev
        else:
            self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner == "F":
                self.flag(node, "torch-compute", "F.%s is PyTorch compute" % func.attr)
            elif owner == "torch" and func.attr not in ALLOWED_TORCH_CALLS:
                self.flag(node, "torch-compute", "torch.%s is PyTorch compute" % func.attr)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and \
                ast.unparse(func.value) in ("torch.nn.functional", "nn.functional"):
            self.flag(node, "torch-compute", "%s is PyTorch compute" % ast.unparse(func))
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and ("\n" in node.value or "#include" in node.value):
            self.cpp_strings.append((node.lineno, node.value))


def lint_python(text, origin):
    try:
        tree = ast.parse(text, filename=origin)
    except SyntaxError as e:
        return [{"file": origin, "line": e.lineno or 0, "rule": "syntax", "message": "syntax error: %s" % e.msg}], True
    linter = _PyLinter(origin)
    linter.visit(tree)
    has_model_new = any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    if not has_model_new:
        linter.flag(tree, "structure", "%s defines no top-level class ModelNew" % origin)
    violations = linter.violations
    for line, text_block in linter.cpp_strings:
        violations += lint_cpp(text_block, origin, base_line=line - 1)
    return violations, False


def lint_candidate(spec):
    """{violations: [...], syntax_error: bool} for the candidate in spec."""
    violations = []
    syntax_error = False
    with open(spec["candidate_module"]) as f:
        v, syntax_error = lint_python(f.read(), os.path.basename(spec["candidate_module"]))
        violations += v
    kernels = os.path.join(spec["candidate_dir"], "kernels")
    if spec["candidate_kind"] == "workspace" and os.path.isdir(kernels):
        for name in sorted(os.listdir(kernels)):
            if os.path.splitext(name)[1] in (".cu", ".cuh", ".cpp", ".h", ".hpp"):
                with open(os.path.join(kernels, name), errors="replace") as f:
                    violations += lint_cpp(f.read(), "kernels/" + name)
    return {"violations": violations, "syntax_error": syntax_error}
