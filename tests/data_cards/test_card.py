"""The card stage: front matter the Hub and `datasets` read, DuckDB statistics, plots, provenance, examples."""

from __future__ import annotations

import re

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.data_cards.conftest import render_card
from tests.data_cards.runs import build_run
from tests.toy_stage import copy_table
from trajkit.data_cards import cli
from trajkit.data_cards.card import size_category
from trajkit.errors import UserError
from trajkit.store import Store


def _front(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def _section(text: str, title: str) -> str:
    start = text.index(title)
    nxt = re.search(r"^#{2,3} ", text[start + len(title) :], re.MULTILINE)
    return text[start : start + len(title) + (nxt.start() if nxt else len(text))]


def test_front_matter_maps_every_table_to_its_shards(carded_run):
    from huggingface_hub import DatasetCard

    text = (carded_run / "card" / "README.md").read_text()
    meta = _front(text)
    store = Store(carded_run)
    assert [c["config_name"] for c in meta["configs"]] == ["sft", "rl", *store.tables()]
    for c in meta["configs"]:
        assert c["data_files"] == [{"split": "train", "path": f"data/{c['config_name']}/*.parquet"}]
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["sft"]
    assert meta["license"] == "unknown" and meta["task_categories"] == ["text-generation"]
    assert meta["size_categories"] == ["n<1K"]
    assert {"trajkit", "tool-use", "weather"} <= set(meta["tags"])
    card = DatasetCard(text)  # huggingface_hub reads the same metadata
    assert card.data.to_dict()["configs"] == meta["configs"]


def test_statistics_match_sql_and_plots_are_pngs(carded_run):
    text = (carded_run / "card" / "README.md").read_text()
    store = Store(carded_run)
    counts = store.sql("SELECT difficulty, count(*) AS n FROM tasks GROUP BY 1").to_pylist()
    assert len(counts) == 5
    for row in counts:
        assert f"| `{row['difficulty']}` | {row['n']} |" in _section(text, "### Difficulty")
    assert "| `completed` | 80 |" in text and "| `failed` | 40 |" in text
    tools = _section(text, "### Tool and server usage")
    assert "| `get_forecast` | `weather` | 30 |" in tools and "| `read_file` | `files` | 30 |" in tools
    assert "| `trajectories` | `filter` | `too_short` | 5 |" in _section(text, "### Rejections")
    assert "| `unsolved` | 4 | 0.125 | 10 |" in _section(text, "### pass@k by difficulty")
    assert "| `split` | `held_out` | 8 |" in text
    plots = sorted(p.name for p in (carded_run / "card" / "plots").glob("*.png"))
    assert plots == sorted(
        f"{n}.png"
        for n in (
            "difficulty",
            "passk_by_difficulty",
            "trajectory_status",
            "tools",
            "servers",
            "turns",
            "tool_calls",
            "tokens",
            "rejections",
        )
    )
    for name in plots:
        assert (carded_run / "card" / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](plots/{name})" in text


def test_pipeline_section_comes_from_the_manifests(carded_run):
    pipeline = _section((carded_run / "card" / "README.md").read_text(), "## Pipeline")
    assert "| `synth-toy` | `synth.toy` |" in pipeline
    assert "Qwen/Qwen3-8B (openai)" in pipeline
    assert "1,200 prompt, 345 completion; cost 0.0125" in pipeline
    assert "temperature: 0.7" in pipeline and "accepted: 40" in pipeline
    assert "`card`" not in pipeline  # the card does not describe itself


def test_examples_render_conversations(carded_run):
    text = (carded_run / "card" / "README.md").read_text()
    examples = _section(text, "## Examples")
    assert "```text\nTask 0: what is the weather in City 0?\n```" in examples
    assert examples.count("<details>") == 2
    # the first trajectories were rejected by a filter: examples skip them
    rejected = {r["row_id"] for r in Store(carded_run).rows("rejected")}
    shown = re.findall(r"trajectory <code>(\w+)</code>", examples)
    assert len(shown) == 2 and not rejected & set(shown)
    assert re.search(r'```text\n(get_forecast|get_alerts|read_file|search)\(\{"city": "City \d+"\}\)\n```', examples)
    assert re.search(r"\*\*`tool`\*\* \(`(get_forecast|get_alerts|read_file|search)`\)", examples)
    assert 'load_dataset("alice/tool-traj", "sft", split="train")' in text


def test_card_cli_renders_afresh_each_time(carded_run, run_dir):
    app = typer.Typer()
    app.command("card")(cli.card)
    app.command("push")(cli.push)
    copy_table(carded_run, run_dir, "tasks")  # a run with tasks only: no plots
    args = ["card", "--run", str(run_dir), "--title", "Weather agents", "--license", "cc-by-4.0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # said once (the stage's line; the command printed it again), on one line, without a row count it never has
    line = f"card: wrote {run_dir / 'card' / 'README.md'} with 0 plot(s); views: sft 0 rows, rl 40 rows\n"
    assert result.output.count("plot(s)") == 1 and line in result.output, result.output
    assert "card: done in" in result.output and "no rows" not in result.output
    meta = _front((run_dir / "card" / "README.md").read_text())
    assert meta["pretty_name"] == "Weather agents" and meta["license"] == "cc-by-4.0"
    # tasks only: the rl view (every task, unjudged) is the default; no trajectories, so no sft view
    assert [c["config_name"] for c in meta["configs"]] == ["rl", "tasks"] and meta["configs"][0]["default"]
    copy_table(carded_run, run_dir, "splits")  # the run changed: the card follows
    assert CliRunner().invoke(app, args).exit_code == 0
    meta = _front((run_dir / "card" / "README.md").read_text())
    assert [c["config_name"] for c in meta["configs"]] == ["rl", "tasks", "splits"]
    missing = CliRunner().invoke(app, ["card", "--run", str(run_dir / "nope")])
    assert isinstance(missing.exception, UserError)


def test_card_of_an_empty_run_is_a_user_error(run_dir):
    with pytest.raises(UserError, match="no tables"):
        render_card(run_dir)


@pytest.mark.parametrize(("n", "label"), [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (1_000_000, "1M<n<10M")])
def test_size_categories(n, label):
    assert size_category(n) == label


MARKUP = (
    '![img](https://evil.example/i.png) <img src="https://evil.example/x.png"> [link](https://evil.example/l) '
    "<https://evil.example/auto> https://evil.example/bare www.evil.example <details open><summary>evil.example"
    '</summary> </details> <script>alert("evil.example")</script> **evil.example** ` `` ``` | pipe | '
    "&lt;evil.example&gt; [ref]: https://evil.example/r <!-- evil.example\n# evil.example heading\n```\n"
    "<img src=https://evil.example/y.png>\n````\n</details>\n"
)


class _Html:
    """Tags and where the payload's text lands in the HTML a Markdown renderer made of the card."""

    def __init__(self, text: str):
        from html.parser import HTMLParser

        self.tags: list[tuple[str, dict]] = []
        self.outside_code: list[str] = []
        stack: list[str] = []

        class Parser(HTMLParser):
            def handle_starttag(p, tag, attrs):
                self.tags.append((tag, dict(attrs)))
                if tag not in ("img", "hr", "br"):
                    stack.append(tag)

            def handle_endtag(p, tag):
                if tag in stack:
                    del stack[len(stack) - 1 - stack[::-1].index(tag) :]

            def handle_data(p, data):
                if "evil" in data and "code" not in stack:
                    self.outside_code.append(data)

            def handle_comment(p, data):
                self.outside_code.append(data)

        Parser(convert_charrefs=True).feed(text)


def test_the_card_shows_markup_from_the_data_as_text(tmp_path):
    """Questions, messages, tool calls, model names, sources and reasons carrying images, links, autolinks,
    HTML and fences: rendered by a CommonMark renderer with GFM tables, none of it is live."""
    from markdown_it import MarkdownIt

    build_run(tmp_path / "run", n_tasks=6, text=MARKUP)
    render_card(tmp_path / "run", examples=2, task_examples=3)
    readme = (tmp_path / "run" / "card" / "README.md").read_text()
    body = readme.split("---\n", 2)[2]
    page = _Html(MarkdownIt("commonmark").enable("table").render(body))
    assert page.outside_code == []  # every character of the data is inside <code> (inline or in <pre>)
    tags = {t for t, _ in page.tags}
    assert "a" not in tags and not tags & {"script", "iframe", "style"}, tags
    assert all(a["src"].startswith("plots/") for t, a in page.tags if t == "img")
    # the card's own <details>: the two example trajectories (this run has no stage manifests), no more
    assert sum(t == "details" for t, _ in page.tags) == 2
    assert readme.count("evil.example/i.png") >= 6  # the data is there, as text
