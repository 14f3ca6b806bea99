"""Build step for the optional compiled kernels (all other metadata is in pyproject.toml).

``gguf_schema._kernels`` is built when a C compiler works; if it cannot be built, or when
``GGUF_SCHEMA_NO_KERNELS=1`` is set, the package installs without it and
``gguf_schema.quants`` uses its numpy kernels (same results, slower).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildKernels(build_ext):
    """Compiler flags by compiler family: optimise, but never contract a*b+c into one FMA
    (ggml rounds the product and the sum separately) and never use fast-math. Traps are
    assumed off (they always are under CPython), which lets loops with selects vectorise;
    no result changes."""

    def build_extensions(self) -> None:
        unix = self.compiler.compiler_type != "msvc"
        for ext in self.extensions:
            ext.extra_compile_args = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math"] if unix else ["/O2", "/fp:precise"]
        super().build_extensions()


kernels = [] if os.environ.get("GGUF_SCHEMA_NO_KERNELS") == "1" else [
    Extension("gguf_schema._kernels", ["gguf_schema/_kernels.c"], optional=True)
]
setup(ext_modules=kernels, cmdclass={"build_ext": BuildKernels})
