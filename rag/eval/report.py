"""The run's two outputs: ``results.json`` (every figure, the configurations and the versions)
and ``report.html`` (one self-contained page: tables, embedded PNG plots, the worst failures)."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag.eval import plots

FORMAT_VERSION = 1
Getter = Callable[[dict[str, Any]], Any]


def _get(*path: str) -> Getter:
    def get(metrics: dict[str, Any]) -> Any:
        value: Any = metrics
        for key in path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    return get


def _interval(*path: str) -> Getter:
    """A (low, high) pair of numbers as "low–high"."""
    inner = _get(*path)

    def get(metrics: dict[str, Any]) -> Any:
        bounds = inner(metrics)
        if not isinstance(bounds, list | tuple) or len(bounds) != 2:
            return None
        if not all(isinstance(b, int | float) for b in bounds):
            return None
        return f"{bounds[0]:.3f}–{bounds[1]:.3f}"

    return get


ROWS: list[tuple[str, str, Getter]] = [
    ("Answers", "accuracy (correct / all)", _get("answers", "accuracy")),
    ("Answers", "exact match", _get("answers", "exact_match")),
    ("Answers", "token F1", _get("answers", "token_f1")),
    ("Answers", "contains gold", _get("answers", "contains_gold")),
    ("Answers", "contains a known wrong answer", _get("answers", "wrong_answer_rate")),
    ("Retrieval", "recall@1", _get("retrieval", "recall@1")),
    ("Retrieval", "recall@3", _get("retrieval", "recall@3")),
    ("Retrieval", "recall@5", _get("retrieval", "recall@5")),
    ("Retrieval", "recall@10", _get("retrieval", "recall@10")),
    ("Retrieval", "MRR@10", _get("retrieval", "mrr@10")),
    ("Retrieval", "gold in the passages shown", _get("retrieval", "context_recall")),
    ("Decisions", "answered", _get("decisions", "answer_rate")),
    ("Decisions", "sent to review", _get("decisions", "review_rate")),
    ("Decisions", "withheld (abstain)", _get("decisions", "abstain_rate")),
    ("Decisions", "declined by the model / retrieval", _get("decisions", "declined_rate")),
    ("Decisions", "accuracy of answered", _get("decisions", "accuracy_answered")),
    ("Decisions", "accuracy of flagged (review + abstain)", _get("decisions", "accuracy_flagged")),
    ("Confidence", "AUROC (confidence vs correct)", _get("confidence", "auroc")),
    ("Confidence", "AUROC 95% interval (bootstrap)", _interval("confidence", "auroc_interval")),
    ("Confidence", "AURC (lower is better)", _get("confidence", "aurc")),
    ("Confidence", "ECE (lower is better)", _get("confidence", "ece")),
    (
        "Confidence",
        "ECE a calibrated confidence shows here by chance (median–95th percentile)",
        _interval("confidence", "ece_noise"),
    ),
    ("Confidence", "mean confidence", _get("confidence", "mean_confidence")),
    ("Labelled answers", "AUROC (confidence vs label)", _get("labelled", "auroc")),
    ("Labelled answers", "ECE", _get("labelled", "ece")),
    ("Labelled answers", "hallucinations let through", _get("labelled", "hallucinations_passed")),
    ("Labelled answers", "right answers flagged", _get("labelled", "right_answers_flagged")),
    (
        "Labelled answers",
        "share right among passed",
        _get("labelled", "decisions", "accuracy_answered"),
    ),
    ("Speed", "time to first token p50 (s)", _get("latency", "time_to_first_token_s", "p50")),
    ("Speed", "time to first token p90 (s)", _get("latency", "time_to_first_token_s", "p90")),
    ("Speed", "end to end p50 (s)", _get("latency", "total_s", "p50")),
    ("Speed", "end to end p90 (s)", _get("latency", "total_s", "p90")),
    ("Speed", "end to end p99 (s)", _get("latency", "total_s", "p99")),
    ("Speed", "tokens/s per request p50", _get("latency", "tokens_per_s", "p50")),
    ("Speed", "throughput (tokens/s, all requests)", _get("latency", "throughput_tokens_per_s")),
    ("Run", "items done", _get("counts", "done")),
    ("Run", "errors", _get("counts", "errors")),
]

JUDGEMENT_ROWS: list[tuple[str, str, Getter]] = [
    (
        "Judgement",
        "AUROC of mean token logprob (baseline)",
        _get("judgement", "auroc_mean_logprob"),
    ),
    (
        "Judgement",
        "yes/no: majority-class baseline accuracy",
        _get("judgement", "yes_no", "majority_baseline_accuracy"),
    ),
    (
        "Judgement",
        "answers repeating a counterfactual",
        _get("judgement", "counterfactual", "repeats_counterfactual_rate"),
    ),
    (
        "Judgement",
        "of those, let through (answered)",
        _get("judgement", "counterfactual", "repeats_answered_rate"),
    ),
    ("Judgement", "right answers flagged (count)", _get("judgement", "num_right_flagged")),
]


def rows_for(configs: list[dict[str, Any]]) -> list[tuple[str, str, Getter]]:
    """The fixed rows, then one per signal (its AUROC alone) and per guard verdict (the accuracy
    of the answers that got it), for whatever the configurations recorded."""
    judged = [c["metrics"].get("judgement") or {} for c in configs]
    signals = sorted({n for j in judged for n in j.get("signals", {})})
    verdicts = sorted(
        {(g, o) for j in judged for g, by in j.get("verdict_accuracy", {}).items() for o in by}
    )
    return [
        *ROWS,
        *JUDGEMENT_ROWS,
        *[
            ("Signals", f"AUROC of {n} alone", _get("judgement", "signals", n, "auroc"))
            for n in signals
        ],
        *[
            (
                "Accuracy by guard verdict",
                f"{g} {o}",
                _get("judgement", "verdict_accuracy", g, o, "accuracy"),
            )
            for g, o in verdicts
        ],
    ]


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;
color:#222}
h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.3rem .55rem;
vertical-align:top;text-align:left}th{background:#f4f4f4}td.num{text-align:right;
font-variant-numeric:tabular-nums}tr.group td{background:#fafafa;font-weight:600}
.plots img{max-width:48%;margin:.5%;border:1px solid #eee}.muted{color:#777}
.fail{color:#c8553d}.pass{color:#4c9a5b}.abstain{color:#888}details{margin:.2rem 0}
code{background:#f4f4f4;padding:0 .2rem}
"""


def clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def write_results(results: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(clean(results), indent=2, ensure_ascii=False))
    tmp.replace(path)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return html.escape(str(value))


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _summary_table(configs: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(c['name'])}</th>" for c in configs)
    rows, group = [], ""
    table = [
        (section, label, [get(c["metrics"]) for c in configs])
        for section, label, get in rows_for(configs)
    ]
    # A section with any figure shows all its rows, empty cells as "—"; a section with none
    # (labelled-answer rows on a generated set) is left out.
    shown = {section for section, _, values in table if any(v is not None for v in values)}
    for section, label, values in table:
        if section not in shown:
            continue
        if section != group:
            rows.append(f'<tr class="group"><td colspan="{len(configs) + 1}">{section}</td></tr>')
            group = section
        cells = "".join(f'<td class="num">{_fmt(v)}</td>' for v in values)
        rows.append(f"<tr><td>{html.escape(label)}</td>{cells}</tr>")
    return f"<table><tr><th>metric</th>{head}</tr>{''.join(rows)}</table>"


def _config_table(configs: list[dict[str, Any]]) -> str:
    def index(c: dict[str, Any]) -> str:
        info = c.get("index")
        return f"{info['name']} ({info['num_chunks']} chunks)" if info else "—"

    rows = "".join(
        f"<tr><td>{html.escape(c['name'])}</td><td><code>"
        f"{html.escape(json.dumps(c['overrides'])) if c['overrides'] else '(defaults)'}"
        f"</code></td><td>{html.escape(index(c))}</td></tr>"
        for c in configs
    )
    return f"<table><tr><th>configuration</th><th>overrides</th><th>index</th></tr>{rows}</table>"


def _verdicts(guards: list[dict[str, Any]]) -> str:
    return "<br>".join(
        f'<span class="{html.escape(g["outcome"])}">{html.escape(g["name"])}: '
        f"{html.escape(g['outcome'])}</span> "
        f'<span class="muted">{html.escape(str(g.get("reason", ""))[:160])}</span>'
        for g in guards
    )


def _passages(passages: list[dict[str, Any]]) -> str:
    return "".join(
        f"<details><summary>{html.escape(p['doc_id'])} ({p['score']:.2f})</summary>"
        f"{html.escape(p['text'])}</details>"
        for p in passages
    )


def _failures_table(config: dict[str, Any]) -> str:
    failures = config["metrics"].get("failures") or []
    if not failures:
        return f"<p class=muted>{html.escape(config['name'])}: no wrong answers.</p>"
    rows = "".join(
        "<tr>"
        f"<td>{html.escape(f['question'])}</td>"
        f"<td>{html.escape(' | '.join(f['gold'][:3]))}</td>"
        f"<td>{html.escape(f['answer'])}</td>"
        f"<td>{html.escape(f['decision'])}<br>{_fmt(f.get('confidence'))}</td>"
        f"<td>{_verdicts(f['guards'])}</td>"
        f"<td>{_passages(f['passages'])}</td>"
        "</tr>"
        for f in failures
    )
    return (
        f"<h3>{html.escape(config['name'])}</h3><table><tr><th>question</th><th>gold</th>"
        "<th>answer</th><th>decision, confidence</th><th>guard verdicts</th><th>passages</th>"
        f"</tr>{rows}</table>"
    )


def _plots(configs: list[dict[str, Any]], latencies: dict[str, list[float]]) -> str:
    def per_config(section: str, key: str) -> dict[str, Any]:
        return {c["name"]: _get(section, key)(c["metrics"]) or [] for c in configs}

    def with_ece(section: str) -> dict[str, Any]:
        return {
            f"{c['name']} (ECE {_fmt(_get(section, 'ece')(c['metrics']))})": bins
            for c, bins in zip(configs, per_config(section, "reliability").values(), strict=True)
        }

    labelled_title = "Reliability diagram (labelled answers)"
    images = [
        _img(plots.reliability_diagram(with_ece("confidence")), "reliability"),
        _img(plots.risk_coverage_curve(per_config("confidence", "risk_coverage")), "risk-coverage"),
        _img(
            plots.reliability_diagram(with_ece("labelled"), labelled_title), "labelled reliability"
        ),
        _img(plots.latency_histogram(latencies), "latency histogram"),
        _img(
            plots.guard_verdicts({c["name"]: c["metrics"]["guards"] for c in configs}),
            "guard verdicts",
        ),
    ]
    return '<div class="plots">' + "".join(images) + "</div>"


def render_html(results: dict[str, Any], latencies: dict[str, list[float]]) -> str:
    """The report page; ``latencies``: end-to-end seconds per question, per configuration."""
    configs = results["configs"]
    dataset, index = results["dataset"], results.get("index") or {}
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    index_line = (
        f"index <b>{html.escape(index['name'])}</b>: {index.get('num_documents')} documents, "
        f"{index.get('num_chunks')} chunks, {html.escape(str(index.get('embedding_model')))}"
        if index
        else "no index (every item carries its passages)"
    )
    title = f"ragguard eval: {html.escape(dataset['name'])}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p>{dataset["num_items"]} of {dataset["num_items_total"]} items (limit {_fmt(dataset["limit"])},
seed {dataset["seed"]}); {index_line}.<br>
<span class="muted">{html.escape(results["created_at"])} ·
<code>{html.escape(results["command"])}</code>
<br>{html.escape(versions)}</span></p>
<h2>Configurations</h2>{_config_table(configs)}
<h2>Summary</h2>{_summary_table(configs)}
<p class="muted">Answers are never withheld while evaluating: each is scored, then the configured
policy is applied to its confidence, so the accuracy of flagged answers is measured too. Latency
is measured under the run's concurrency ({results["threads"]} questions in flight).</p>
<h2>Plots</h2>{_plots(configs, latencies)}
<h2>Worst failures</h2>
<p class="muted">Wrong answers, those the policy let through first, the most confident first.</p>
{"".join(_failures_table(c) for c in configs)}
</body></html>
"""


def render_markdown(results: dict[str, Any]) -> str:
    """The summary table as Markdown (for a pull request or a changelog)."""
    configs = results["configs"]
    lines = [
        f"**{results['dataset']['name']}**: {results['dataset']['num_items']} items, "
        f"`{results['command']}`",
        "",
        "| metric | " + " | ".join(c["name"] for c in configs) + " |",
        "| --- |" + " --- |" * len(configs),
    ]
    table = [
        (section, label, [get(c["metrics"]) for c in configs])
        for section, label, get in rows_for(configs)
    ]
    shown = {section for section, _, values in table if any(v is not None for v in values)}
    for section, label, values in table:
        if section in shown:
            cells = " | ".join(html.unescape(_fmt(v)) for v in values)
            lines.append(f"| {section}: {label} | {cells} |")
    return "\n".join(lines) + "\n"


def write_report(results: dict[str, Any], latencies: dict[str, list[float]], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(clean(results), latencies), encoding="utf-8")
    tmp.replace(path)
