"""Build step: the packages, and the optional compiled modules (all other metadata is in pyproject.toml).

The packages are ``gguf_schema`` and its subpackages, plus the top-level ``spec/`` folder (the GGUF
specification transcribed, ``spec/gguf.json``, and its README) installed as ``gguf_schema.spec``:
one copy in the repository, package data in the wheel, and found through the same name by an
editable install (``pip install -e .`` maps ``gguf_schema.spec`` to ``spec/``). pyproject.toml
cannot map one subpackage to a folder outside its parent while finding the others, so the list is made here.

``gguf_schema.tensors._kernels`` is built from ``gguf_schema/tensors/csrc`` and
``gguf_schema.format._scan`` (the walk over string arrays) from ``gguf_schema/format/csrc`` when a
C compiler works; if one cannot be built, or when ``GGUF_SCHEMA_NO_KERNELS=1`` is set, the package
installs without it and the library uses its numpy kernels and Python loops (same results, slower).
"""

import os
import sys

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

#: the note printed when a compiled module could not be built (the install goes on without it)
NOT_BUILT = (
    "gguf-schema: note: the optional compiled module(s) {names} could not be built (the compiler's message is "
    "above); the package "
    "installs without them and uses its numpy kernels and Python loops: the same results, several times "
    "slower for quantizing. Install a C compiler and the Python headers (Debian: apt-get install gcc "
    "python3-dev) and install again to build them; `gguf-schema --version` lists which are active."
)


class BuildKernels(build_ext):
    """Compiler flags by compiler family: optimise, but never contract a*b+c into one FMA
    (ggml rounds the product and the sum separately) and never use fast-math. Traps are
    assumed off (they always are under CPython), which lets loops with selects vectorise;
    no result changes. A module that fails to build is named in a note at the end (the
    extensions are optional: the install goes on)."""

    def build_extensions(self) -> None:
        unix = self.compiler.compiler_type != "msvc"
        for ext in self.extensions:
            ext.extra_compile_args = (
                ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math"] if unix else ["/O2", "/fp:precise"]
            )
        self.failed: list[str] = []
        super().build_extensions()
        if self.failed:
            names = ", ".join(self.failed)
            print("\n" + NOT_BUILT.format(names=names) + "\n", file=sys.stderr, flush=True)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception:  # optional: setuptools warns and goes on without it
            self.failed.append(ext.name)
            raise


CSRC = "gguf_schema/tensors/csrc"
KERNEL_SOURCES = sorted(f"{CSRC}/{name}" for name in os.listdir(CSRC) if name.endswith(".c"))
SCAN_CSRC = "gguf_schema/format/csrc"
SCAN_SOURCES = sorted(f"{SCAN_CSRC}/{name}" for name in os.listdir(SCAN_CSRC) if name.endswith(".c"))
if os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1":
    print(
        "gguf-schema: note: GGUF_SCHEMA_NO_KERNELS=1: the optional compiled modules are not built "
        "(the numpy kernels and Python loops do their work, more slowly)",
        file=sys.stderr,
    )
kernels = (
    []
    if os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1"
    else [
        Extension(
            "gguf_schema.tensors._kernels",
            KERNEL_SOURCES,
            include_dirs=[CSRC],
            depends=[f"{CSRC}/common.h"],
            optional=True,
        ),
        Extension("gguf_schema.format._scan", SCAN_SOURCES, optional=True),
    ]
)
setup(
    packages=[*find_namespace_packages(include=["gguf_schema*"]), "gguf_schema.spec"],
    package_dir={"gguf_schema.spec": "spec"},
    ext_modules=kernels,
    cmdclass={"build_ext": BuildKernels},
)
