"""Maps the repository's top-level folders into the one import namespace `icml26zoo` (see pyproject.toml)."""

from setuptools import find_packages, setup

FOLDERS = {
    "icml26zoo": "zoo",
    "icml26zoo.kernels": "kernels",
    "icml26zoo.train": "train",
    "icml26zoo.configs": "configs",
    "icml26zoo.repro": "repro",
}

packages = []
for name, folder in FOLDERS.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=FOLDERS, package_data={"icml26zoo": ["py.typed"]})
