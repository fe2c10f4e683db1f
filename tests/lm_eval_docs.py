"""Hand-written documents in each task's hub format, and task YAMLs that point
lm-evaluation-harness's own task definitions at them (offline)."""

import json
from pathlib import Path
from typing import Dict, List

import lm_eval

LM_EVAL_TASKS = Path(lm_eval.__file__).parent / "tasks"


def _arc(question: str, texts: List[str], key: str) -> Dict:
    return {"question": question, "choices": {"text": texts, "label": list("ABCDE"[: len(texts)])}, "answerKey": key}


def _mmlu(n: int, answer: int) -> Dict:
    return {"question": f" What is {n} + {n}? ", "subject": "abstract_algebra",
            "choices": [str(2 * n + d) for d in (-1, 0, 1, 2)], "answer": answer}


#: task -> split -> rows. Three training (or dev) rows give 2-shot prompts.
DOCS: Dict[str, Dict[str, List[Dict]]] = {
    "piqa": {
        "train": [{"goal": f"Goal {n}", "sol1": f"Use tool {n}.", "sol2": f"Use no tool {n}.", "label": n % 2}
                  for n in range(3)],
        "validation": [{"goal": "Open a jar", "sol1": "Twist the lid.", "sol2": "Eat the lid.", "label": 0},
                       {"goal": "Dry shoes", "sol1": "Freeze them.", "sol2": "Use newspaper.", "label": 1}],
    },
    "arc_easy": {
        "train": [_arc(f"Train question {n}?", ["yes", "no", "maybe"], "ABC"[n]) for n in range(3)],
        "validation": [_arc("Which gas do plants take in?", ["oxygen", "carbon dioxide", "helium"], "B"),
                       _arc("What is ice?", ["frozen water", "hot air"], "A")],
    },
    "openbookqa": {
        "train": [{"question_stem": f"Stem {n} is", "choices": {"text": ["a", "b"], "label": ["A", "B"]},
                   "answerKey": "B"} for n in range(3)],
        "validation": [{"question_stem": "The sun is", "choices": {"text": ["a star", "a planet"], "label": ["A", "B"]},
                        "answerKey": "A"}],
    },
    "hellaswag": {
        "train": [{"activity_label": f"Task {n}", "ctx_a": "A man waits.", "ctx_b": "he", "label": "1",
                   "endings": ["sits [title] down.", "stands up.", "leaves.", "sings."]} for n in range(3)],
        "validation": [{"activity_label": "Making a cake", "ctx_a": "A man mixes flour.", "ctx_b": "he",
                        "endings": ["bakes it [title] well.", "eats  the bowl.", "sings.", "leaves."], "label": "0"}],
    },
    "winogrande": {
        "train": [{"sentence": f"Ann lent Bo {n} pens because _ had many.", "option1": "Ann", "option2": "Bo",
                   "answer": "1"} for n in range(3)],
        "validation": [{"sentence": "The trophy did not fit in the case because the _ was too big.",
                        "option1": "trophy", "option2": "case", "answer": "1"}],
    },
    "boolq": {
        "train": [{"passage": f"Fact {n}.", "question": f"is fact {n} true", "label": 1} for n in range(3)],
        "validation": [{"passage": "Water boils at 100 C.", "question": "does water boil at 100 c", "label": 1}],
    },
    "sciq": {
        "train": [{"support": "", "question": f"Q{n}?", "distractor1": "a", "distractor2": "b", "distractor3": "c",
                   "correct_answer": "d"} for n in range(3)],
        "validation": [{"support": "  Cells divide.", "question": "What divides?", "distractor1": "rocks",
                        "distractor2": "water", "distractor3": "air", "correct_answer": "cells"}],
    },
    "commonsense_qa": {
        "train": [_arc(f" Where is thing {n}? ", ["home", "work", "park", "shop", "car"], "C") for n in range(3)],
        "validation": [_arc("Where do you keep milk?", ["fridge", "oven", "bed", "roof", "shoe"], "A")],
    },
    "social_iqa": {
        "train": [{"context": f"Kim helped {n}.", "question": "Why?", "answerA": "kind", "answerB": "mean",
                   "answerC": "bored", "label": "1"} for n in range(3)],
        "validation": [{"context": "Alex gave a gift.", "question": "How does Alex feel?", "answerA": "sad",
                        "answerB": "happy", "answerC": "angry", "label": "2"}],
    },
    "mmlu": {
        "dev": [_mmlu(n, n % 4) for n in range(6)],
        "test": [_mmlu(10, 1), _mmlu(11, 3)],
    },
}

#: Our task name -> (lm-evaluation-harness YAML, its task name).
YAMLS = {
    "piqa": ("piqa/piqa.yaml", "piqa"),
    "arc_easy": ("arc/arc_easy.yaml", "arc_easy"),
    "openbookqa": ("openbookqa/openbookqa.yaml", "openbookqa"),
    "hellaswag": ("hellaswag/hellaswag.yaml", "hellaswag"),
    "winogrande": ("winogrande/default.yaml", "winogrande"),
    "boolq": ("super_glue/boolq/default.yaml", "boolq"),
    "sciq": ("sciq/sciq.yaml", "sciq"),
    "commonsense_qa": ("commonsense_qa/default.yaml", "commonsense_qa"),
    "social_iqa": ("siqa/siqa.yaml", "social_iqa"),
    "mmlu": ("mmlu/default/mmlu_abstract_algebra.yaml", "mmlu_abstract_algebra"),
    "mmlu_cloze": ("mmlu/continuation/mmlu_abstract_algebra.yaml", "mmlu_abstract_algebra_continuation"),
}


def write_docs(directory: Path) -> Dict[str, Dict[str, str]]:
    """Each task's rows as jsonl files: task -> split -> path."""
    files: Dict[str, Dict[str, str]] = {}
    for task, splits in DOCS.items():
        for split, rows in splits.items():
            path = directory / f"{task}_{split}.jsonl"
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
            files.setdefault(task, {})[split] = str(path)
    return files


def write_yamls(directory: Path, files: Dict[str, Dict[str, str]]) -> None:
    """``local_<name>``: lm-evaluation-harness's task ``name``, reading our files. Splits the
    files lack are switched off (e.g. ARC's test split)."""
    for name, (yaml_path, _) in YAMLS.items():
        data = files[name.removesuffix("_cloze")]
        lines = [f"task: local_{name}", f"include: {LM_EVAL_TASKS / yaml_path}", "dataset_path: json",
                 "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(data)}}}"]
        if name.startswith("mmlu"):
            lines.append("tag: []")
        else:
            lines += [f"{key}: {split if split in data else 'null'}" for key, split in
                      (("training_split", "train"), ("validation_split", "validation"), ("test_split", "test"))]
        (directory / f"local_{name}.yaml").write_text("\n".join(lines) + "\n")


GENERATION_YAMLS = Path(__file__).parent / "data" / "lm_eval_generation"


def copy_generation_yamls(directory: Path) -> str:
    """tests/data/lm_eval_generation's task YAMLs and documents in ``directory``, the YAMLs
    pointed at the documents there (their ``DATA_DIR``)."""
    for path in GENERATION_YAMLS.iterdir():
        if path.is_file():
            text = path.read_text()
            (directory / path.name).write_text(text.replace("DATA_DIR", str(directory)) if path.suffix == ".yaml" else text)
    return str(directory)
