"""The scripts import and find what they read and write (their runs take minutes to hours)."""

from icml_compress_experiments.proteus import vet_mulbal
from icml_compress_experiments.quantize import proteus_seeds


def test_vet_mulbal_writes_the_committed_table():
    assert vet_mulbal.OUT.is_file() and vet_mulbal.OUT.parts[-3:] == (
        "icml-compress",
        "docs",
        "mulbal_vetting.csv",
    )


def test_proteus_seeds_parses_seed_ranges():
    assert proteus_seeds.seed_list("3-9") == [3, 4, 5, 6, 7, 8, 9] and proteus_seeds.seed_list("2") == [2]
