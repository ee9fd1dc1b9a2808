"""Which packages the wheel holds: everything under src/, and bench/ as `purelink.bench`.

Why a setup.py: `purelink bench` is a verb of the installed command (the
benchmark suite, bench/ in the checkout), so a plain `pip install .` must
ship it; the scripts stay in bench/ (`python -m bench.queue` from the
checkout, as the docs say), mapped to `purelink.bench` in the wheel.
pyproject.toml cannot say "find the packages under src/ and add this one",
and a fixed list would silently leave out the next package someone adds.
Everything else about the build is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("src"), "purelink.bench"],
    package_dir={"": "src", "purelink.bench": "bench"},
)
