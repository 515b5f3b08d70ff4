from __future__ import annotations

import json

import numpy as np

from research import aux_study
from research.auxiliary import overlapping_rows, question_stem

HELD_MMLU = "Find the degree for the given field extension Q(sqrt(2)) over Q.\nA. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
HELD_FEW_SHOT = (
    "Which gas do plants take in for photosynthesis?\nA) oxygen\nB) carbon dioxide\nAnswer:\nB\n\n"
    "Which property of a mineral can be determined just by looking at it?\nA) luster\nB) mass\nAnswer:"
)
HELD_CODE = "Write a function to remove all elements from a given list present in another list."


def test_stem_drops_options_and_question_marker():
    assert question_stem("Question:  What is  2+2?\nAnswer:") == "what is 2+2?"
    assert question_stem("Q?\n(A) x\n(B) y") == "q?"
    assert question_stem("运行中变压器温度最高的部分是\nA. 绕组\n答案：") == "运行中变压器温度最高的部分是"


def test_held_out_prompts_in_other_formats_are_excluded_and_others_kept():
    aux = [
        # the held-out MMLU question, other option formatting, other case and spacing
        "find the degree for the given  field extension Q(sqrt(2)) over Q.\nA. Zero\nB. Four\nC. Two\nD. Six",
        # the held-out few-shot prompt's final question in routerdc's ARC format
        "Question:Which property of a mineral can be determined just by looking at it?\nAnswer:",
        # a few-shot example of the held-out prompt counts as seen too (conservative)
        "Question:Which gas do plants take in for photosynthesis?\nAnswer:",
        # the held-out coding task quoted inside a longer prompt
        '"""\nWrite a function to remove all elements from a given list present in another list.\n'
        'assert remove_elements([1,2],[2]) == [1]\n"""\n',
        "Natalia sold clips to 48 of her friends in April. How many clips did she sell?",
        "Which of the following is a mammal?\nA. shark\nB. whale",
    ]
    mask = overlapping_rows(aux, [HELD_MMLU, HELD_FEW_SHOT, HELD_CODE])
    assert mask.tolist() == [True, True, True, True, False, False]
    assert not overlapping_rows(aux, []).any()


def _rows(n: int, rng: np.random.Generator, prefix: str, models: tuple[str, ...]) -> list[dict[str, object]]:
    rows = []
    for i in range(n):
        hard = i % 2
        scores = {m: float(rng.random() < (0.3 if hard and j else 0.9)) for j, m in enumerate(models)}
        rows.append({"id": f"{prefix}.{i}", "prompt": f"{'hard algebra' if hard else 'easy chat'} task {prefix} {i}.",
                     "scores": scores})
    return rows


def test_aux_study_never_trains_on_a_held_out_prompt(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    main = _rows(80, rng, "m", ("strong", "weak"))
    aux = _rows(60, rng, "a", ("s1", "s2", "s3"))
    for r in main[:40]:  # the auxiliary set holds every main prompt, reformatted
        aux.append({"id": f"a.copy.{r['id']}", "prompt": f"Question: {str(r['prompt']).upper()}\nAnswer:",
                    "scores": {"s1": 1.0, "s2": 0.0, "s3": 1.0}})
    for name, rows in (("main.jsonl", main), ("aux.jsonl", aux)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    held_prompts = {main[i]["prompt"] for i in aux_study.split_indices(80, 0.5, 0)[1]}
    seen: list[list[str]] = []
    real_fit = aux_study.fit_knn

    def spy(x, y, k):  # every difficulty model's training rows, by their vectors
        seen.append([tuple(v) for v in x])
        return real_fit(x, y, k)

    monkeypatch.setattr(aux_study, "fit_knn", spy)
    out = tmp_path / "r.json"
    assert aux_study.main(["--data", str(tmp_path / "main.jsonl"), "--aux", str(tmp_path / "aux.jsonl"),
                           "--embedder", "charngram", "--cache", str(tmp_path / "c"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    held_in_aux = sum(1 for r in main[:40] if r["prompt"] in held_prompts)
    assert held_in_aux > 0 and result["aux_rows_dropped_as_held_out"] == held_in_aux
    assert set(result["cv_apgr"]) == {"base", "blend-0.25", "blend-0.5", "pseudo"}
    assert result["chosen_by_cv"] in result["cv_apgr"]
    # The final difficulty model (fitted last) holds every auxiliary row but the held-out copies.
    copies = [f"Question: {str(p).upper()}\nAnswer:" for p in held_prompts if p in {r["prompt"] for r in main[:40]}]
    vectors = aux_study.embed("charngram", copies, tmp_path / "c")
    final_rows = set(seen[-1])
    assert len(final_rows) == len(aux) - held_in_aux
    assert not any(tuple(v) in final_rows for v in vectors)
