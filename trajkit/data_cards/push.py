"""Push a run's card, plots and shards to a Hugging Face dataset repository.

Layout in the repo: see ``layout.py``. A small run goes up in one commit. A
large one goes up in several (at most ``files_per_commit`` files and
``bytes_per_commit`` bytes each, the card last so it only appears once its
data is there); rerunning an interrupted push resumes it, because
``huggingface_hub`` drops files whose content the repo already has. The token
comes from ``HF_TOKEN`` or the saved login and is never printed or logged.
Nothing is uploaded unless push can vouch for every file: a regular file inside
the run (no symbolic or hard link, nothing outside it), of a type it reads (the
README as text, Parquet shards, PNG plots), in which the scan finds no secret:
the strings of a Parquet file, the text and inflated chunks of a PNG, and the
raw bytes of every file.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trajkit.data_cards import layout
from trajkit.data_cards.markdown import fmt_bytes
from trajkit.data_cards.png import UnreadablePng
from trajkit.data_cards.secret_scan import (
    MAX_FINDINGS,
    Finding,
    env_secrets,
    scan_bytes,
    scan_parquet,
    scan_png,
    scan_text,
)
from trajkit.errors import UserError
from trajkit.store import Store, existing_run

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
FILES_PER_COMMIT = 100
BYTES_PER_COMMIT = 2 * 2**30


@dataclass
class PushResult:
    repo_id: str
    url: str | None
    files: list[layout.RepoFile]
    commits: int
    dry_run: bool


def plan(store: Store) -> list[layout.RepoFile]:
    """Every file to upload: the shards, then the card and its plots."""
    card = layout.card_files(store)
    if not card:
        raise UserError(f"no card in {layout.card_dir(store)}; run `trajkit card --run {store.root}` first")
    data = layout.data_files(store)
    if not data:
        raise UserError(f"{store.root} has no table shards to push")
    return data + card


def check_reviews_applied(store: Store) -> None:
    """A UserError when a human review came after the card was rendered: its views would publish rows the
    review rejected (or leave out rows it accepted)."""
    from trajkit.data_cards.card import review_summary

    readme = layout.card_dir(store) / layout.README
    _, newest = review_summary(store)
    if newest is not None and newest.timestamp() > readme.stat().st_mtime:
        raise UserError(
            f"the card is older than the newest review ({newest.isoformat()}): "
            f"run `trajkit card --run {store.root}` to apply it, then push"
        )


def batches(files: list[layout.RepoFile], files_per_commit: int, bytes_per_commit: int) -> list[list[layout.RepoFile]]:
    """Group files into commits; the card files (README, plots) travel together in the last one."""
    card = [f for f in files if not f.path_in_repo.startswith("data/")]
    data = [f for f in files if f.path_in_repo.startswith("data/")]
    out: list[list[layout.RepoFile]] = [[]]
    size = 0
    for f in data:
        if out[-1] and (len(out[-1]) >= files_per_commit or size + f.size > bytes_per_commit):
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.size
    if len(out[-1]) + len(card) > files_per_commit:
        out.append([])
    out[-1].extend(card)
    return out


def vouch(files: list[layout.RepoFile], root: Path) -> None:
    """A UserError naming the first file push cannot vouch for: not a regular file (a link, a folder, a
    device), linked elsewhere (more than one hard link), outside the run, or of a type the scan does not
    read (the README, ``data/**.parquet``, ``plots/*.png``)."""
    inside = root.resolve()
    for f in files:
        st = f.local.lstat()
        if not stat.S_ISREG(st.st_mode) or f.local.is_symlink():
            problem = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a regular file"
        elif st.st_nlink > 1:
            problem = f"has {st.st_nlink} hard links (its content lives elsewhere too)"
        elif not f.local.resolve().is_relative_to(inside):
            problem = f"lies outside the run ({f.local.resolve()})"
        elif not _KINDS.match(f.path_in_repo):
            problem = "is not a file push scans (README.md, data/**/*.parquet, plots/*.png)"
        else:
            continue
        raise UserError(f"refusing to push: {f.local} {problem}; remove it from the run and push again")


_KINDS = re.compile(rf"^(?:{re.escape(layout.README)}|data/[^/]+/[^/]+\.parquet|{layout.PLOTS}/[^/]+\.png)$")


def scan(files: list[layout.RepoFile]) -> list[Finding]:
    """Secrets in the card (text), every shard (Parquet strings), every plot (PNG chunks), and the raw
    bytes of each. A PNG the scan cannot read is a UserError."""
    literals = env_secrets()
    found: list[Finding] = []
    for f in files:
        if f.path_in_repo.endswith(".md"):
            found += scan_text(f.local.read_text(errors="replace"), f.path_in_repo, literals)
        elif f.path_in_repo.endswith(".parquet"):
            found += scan_parquet(f.local, f.path_in_repo, literals)
        elif f.path_in_repo.endswith(".png"):
            try:
                found += scan_png(f.local, f.path_in_repo, literals)
            except UnreadablePng as e:
                raise UserError(f"refusing to push: {f.local} is a PNG the scan cannot read: {e}") from None
        if not found:  # what a format's reader does not show: Parquet metadata, bytes after a PNG's end
            found += scan_bytes(f.local, f.path_in_repo, literals)
        if len(found) >= MAX_FINDINGS:
            break
    return found


def push(
    run: Path,
    repo_id: str,
    private: bool = False,
    dry_run: bool = False,
    endpoint: str | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    files_per_commit: int = FILES_PER_COMMIT,
    bytes_per_commit: int = BYTES_PER_COMMIT,
    echo: Callable[[str], None] = print,
) -> PushResult:
    """Scan, then upload (or with ``dry_run`` list) the card, plots and shards of a run."""
    if not REPO_ID.match(repo_id):
        raise UserError(f"--repo must look like user/name, not {repo_id!r}")
    if files_per_commit < 1 or bytes_per_commit < 1:
        raise UserError("files and bytes per commit must be positive")
    store = existing_run(run)
    files = plan(store)
    vouch(files, store.root)
    check_reviews_applied(store)
    findings = scan(files)
    if findings:
        shown = "; ".join(str(f) for f in findings[:5])
        more = f" (and {len(findings) - 5} more)" if len(findings) > 5 else ""
        raise UserError(
            f"refusing to push {repo_id}: {len(findings)} possible secret(s) found: {shown}{more}. "
            "Remove them from the run (and re-render the card) before pushing."
        )
    groups = batches(files, files_per_commit, bytes_per_commit)
    if dry_run:
        for f in files:
            echo(f"{f.size:>14,}  {f.path_in_repo}  <- {f.local}")
        total = sum(f.size for f in files)
        echo(
            f"{len(files)} files, {total:,} bytes ({fmt_bytes(total)}) in {len(groups)} commit(s) to datasets/{repo_id}"
            f"{' (private)' if private else ''}; dry run, nothing uploaded"
        )
        return PushResult(repo_id, None, files, len(groups), True)
    url = _upload(
        repo_id, groups, private, endpoint, revision, commit_message or f"Upload {store.root.name} with trajkit", echo
    )
    return PushResult(repo_id, url, files, len(groups), False)


def _upload(
    repo_id: str,
    groups: list[list[layout.RepoFile]],
    private: bool,
    endpoint: str | None,
    revision: str | None,
    message: str,
    echo: Callable[[str], None],
) -> str:
    from huggingface_hub import CommitOperationAdd, HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError, HTTPError  # HTTPError: its HTTP library's base class

    token = get_token()
    if not token:
        raise UserError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    api = HfApi(endpoint=endpoint, token=token)
    step = "creating the repository"
    try:
        repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        for i, group in enumerate(groups, 1):
            step = f"commit {i}/{len(groups)}"
            ops = [CommitOperationAdd(path_in_repo=f.path_in_repo, path_or_fileobj=str(f.local)) for f in group]
            title = message if len(groups) == 1 else f"{message} (part {i}/{len(groups)})"
            api.create_commit(repo_id, ops, commit_message=title, repo_type="dataset", revision=revision)
            echo(f"{step}: {len(group)} file(s), {fmt_bytes(sum(f.size for f in group))}")
    except (HfHubHTTPError, HTTPError, OSError, ValueError) as e:  # HTTPError: no network, a refused connection
        raise UserError(
            f"push to {repo_id} at {api.endpoint} failed at {step}: {_first_line(e)}; rerun the same command to "
            "resume (files already on the Hub are skipped)"
        ) from None
    return str(repo_url)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
