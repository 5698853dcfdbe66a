"""The workload registry (medddpm.workloads) against what else states the workloads: the config schema's values, the
readers' own channels, and the preparation settings each source depends on (written out here by hand)."""

from pathlib import Path

import pytest
import yaml
from medddpm.workloads import WORKLOADS, preparation_settings, read_raw, source_of, synthetic_sources, workload_of

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())["properties"]
DATASET = {"source": None, "root": "data/x", "scaling": "volume", "layout": "preprocessed", "case_list": None}


def test_the_schema_allows_exactly_the_registered_workloads_and_sources():
    assert SCHEMA["workload"]["enum"] == list(WORKLOADS)
    sources = SCHEMA["dataset"]["properties"]["source"]["enum"]
    assert sorted(sources) == sorted(name for workload in WORKLOADS.values() for name in workload.source_names)


@pytest.mark.parametrize("source, expected", [
    ("synthetic", {"source": "synthetic", "scaling": "volume"}),
    ("wholehead", {"source": "wholehead", "scaling": "volume"}),
    ("brats", {"source": "brats", "layout": "preprocessed"}),
    # the synthetic BraTS cases are written in the raw layout, whatever dataset.layout says
    ("synthetic_brats", {"source": "synthetic_brats", "layout": "raw"}),
])
def test_preparation_depends_on_the_source_and_its_workloads_own_settings(source, expected):
    assert preparation_settings(workload_of(source).name, DATASET | {"source": source}) == expected


def test_each_synthetic_source_has_its_own_rule_and_belongs_to_one_workload():
    found = {source.name: (workload.name, source.rule) for workload, source in synthetic_sources()}
    assert found == {"synthetic": ("wholehead", "synthetic_dataset"),
                     "synthetic_brats": ("brats", "synthetic_brats_dataset")}
    assert not source_of("wholehead").synthetic and not source_of("brats").synthetic


@pytest.mark.parametrize("name, logged", [
    ("synthetic", "wrote 4 files: 2 cases of shape [16, 16, 16], seed 0"),  # an image and a mask per case
    # five files per case (four modalities and seg), each case 240 x 240 x 155 scaled as 192 x 192 x 144 is to 16^3
    ("synthetic_brats", ("wrote 10 files: 2 raw BraTS cases of shape (20, 20, 17) for the prepared [16, 16, 16], "
                         "seed 0")),
])
def test_a_synthetic_source_is_read_by_a_reader_with_its_workloads_channels(name, logged, tmp_path):
    source, workload = source_of(name), workload_of(name)
    assert source.derive(tmp_path / "raw", 2, [16, 16, 16], 0) == logged
    cases, reader = read_raw(tmp_path / "raw", preparation_settings(workload.name, DATASET | {"source": name}))
    described = reader.description()
    assert len(cases) == 2 and described["workload"] == workload.name
    assert (len(described["image_channels"]), len(described["mask_channels"])) == (workload.image_channels,
                                                                                    workload.mask_channels)
