"""``acms search text|hybrid`` with the plain syntax, filters and the tantivy
syntax, driven as a user runs them; and an index of the previous text schema
upgraded by a normal reindex."""

from __future__ import annotations

import json
import os
import sqlite3
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REINDEX = REPO / "scripts" / "reindex.py"
SCOPE = ("--project", "local/net")


class Cli:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.env = {**os.environ, "ACMS_DATA_DIR": str(data_dir)}
        self.env.pop("ACMS_PROFILE", None)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok("--json", *args))

    def reindex(self) -> None:
        done = subprocess.run(
            [sys.executable, str(REINDEX)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr


def write_project(root: Path) -> Path:
    (root / "net" / "streams").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "net" / "__init__.py").write_text("")
    (root / "net" / "base.py").write_text(
        "def create_connection(host, port):\n"
        '    """Open a socket to host:port."""\n'
        "    return socket_for(host, port)\n"
    )
    (root / "net" / "streams" / "open.py").write_text(
        "from net.base import create_connection\n\n\n"
        "def open_connection(host, port):\n"
        '    """A wrapper for create_connection() returning a (reader, writer) pair."""\n'
        "    sock = create_connection(host, port)\n"
        "    return reader_of(sock), writer_of(sock)\n"
    )
    (root / "net" / "client.py").write_text(
        "from net.base import create_connection\n\n"
        "conn = create_connection('a', 1)\n"
        "other = create_connection('b', 2)\n"
    )
    (root / "docs" / "guide.md").write_text("# Guide\n\nCall create_connection to connect.\n")
    return root


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    base = tmp_path_factory.mktemp("text-query")
    cli = Cli(base / "data")
    src = write_project(base / "src")
    cli.ok("project", "add", "local/net")
    cli.ok("resource", "add", str(src), "--project", "local/net")
    cli.reindex()
    return cli


SOUP = [
    string.punctuation,
    "foo(",
    "D. (k[,d]) -> D.get(k,d)",
    "self.transitive_objects(",
    "A wrapper for create_connection() returning a (reader, writer) pair.",
    '"unbalanced (( resource_id:* AND NOT -',
    "()!?",
]


@pytest.mark.parametrize("query", SOUP)
def test_no_plain_query_exits_2(cli: Cli, query: str) -> None:
    cli.ok("search", "text", query, *SCOPE)
    assert isinstance(cli.json("search", "text", query, *SCOPE), list)
    cli.ok("search", "hybrid", query, *SCOPE)


def test_the_definition_ranks_first_and_hits_carry_match_lines(cli: Cli) -> None:
    hits = cli.json("search", "text", "create_connection", *SCOPE)
    assert hits[0]["metadata"]["path"] == "net/base.py"
    assert hits[0]["metadata"]["match_lines"] == "1"
    client = next(h for h in hits if h["metadata"]["path"] == "net/client.py")
    assert client["metadata"]["match_lines"] == "1,3,4"
    pasted = "A wrapper for create_connection() returning a (reader, writer) pair."
    assert cli.json("search", "text", pasted, *SCOPE)[0]["metadata"]["path"] == (
        "net/streams/open.py"
    )


@pytest.mark.parametrize(
    ("options", "paths"),
    [
        (("--path", "net/*"), {"net/base.py", "net/client.py"}),
        (("--path", "net/**/*.py"), {"net/base.py", "net/client.py", "net/streams/open.py"}),
        (("--path", "docs/"), {"docs/guide.md"}),
        (("--path", "{docs,net/streams}/*.{md,py}"), {"docs/guide.md", "net/streams/open.py"}),
        (("--lang", "markdown"), {"docs/guide.md"}),
        (("--lang", "Python", "--path", "**/open.py"), {"net/streams/open.py"}),
        (("--syntax", "tantivy"), {"net/base.py", "net/client.py", "net/streams/open.py"}),
    ],
)
def test_filters(cli: Cli, options: tuple[str, ...], paths: set[str]) -> None:
    query = "lang:python AND create_connection" if "tantivy" in options else "create_connection"
    hits = cli.json("search", "text", query, *options, *SCOPE, "--max-results", "50")
    assert {h["metadata"]["path"] for h in hits} == paths


def test_hybrid_search_filters_every_source(cli: Cli) -> None:
    def paths(*options: str) -> set[str]:
        found = cli.json("search", "hybrid", "create_connection", *options, *SCOPE)
        items = found["results"] if isinstance(found, dict) else found
        return {h.get("path") or h["metadata"]["path"] for h in items}

    assert {"net/streams/open.py", "docs/guide.md"} <= paths()  # unfiltered: both kinds
    assert paths("--path", "net/*") == {"net/base.py", "net/client.py"}
    assert paths("--path", "**/{base,guide}.*") == {"net/base.py", "docs/guide.md"}
    assert paths("--lang", "markdown") == {"docs/guide.md"}


def test_filters_with_no_match_say_no_results(cli: Cli) -> None:
    assert "no results" in cli.ok("search", "text", "create_connection", "--lang", "go", *SCOPE)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("search", "text", "foo(", "--syntax", "tantivy"), "invalid query"),
        (("search", "text", "body:x", "--syntax", "tantivy"), "cannot be searched"),
        (("search", "text", "x", "--syntax", "lucene"), "invalid choice"),
        (("search", "text", "x", "--path", ""), "glob is empty"),
        (("search", "text", "x", "--path", "net/[a-"), "path glob 'net/[a-' holds '['"),
        (("search", "hybrid", "x", "--path", "**/*.{py,md"), "'{' that no '}' closes"),
        (("search", "text", "x", "--lang", "py thon"), "not a language"),
        (("search", "hybrid", "x", "--syntax", "tantivy"), "plain syntax only"),
    ],
)
def test_bad_options_exit_2_with_one_clear_line(
    cli: Cli, args: tuple[str, ...], message: str
) -> None:
    done = cli.run(*args, *SCOPE)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- upgrade


def _old_schema_shards(text_dir: Path) -> list[Path]:
    """Rewrite every shard with the previous schema, as the previous version left them."""
    import tantivy

    from cleveragents.infrastructure.acms.tantivy_query import ANALYZER_NAME, code_analyzer

    shards = [p.parent for p in text_dir.resolve().glob("*/meta.json")]
    for shard in shards:
        index = tantivy.Index.open(str(shard))
        index.register_tokenizer(ANALYZER_NAME, code_analyzer())
        index.register_tokenizer("cleveragents_keyword", code_analyzer())
        searcher = index.searcher()
        docs = [searcher.doc(a) for _, a in searcher.search(tantivy.Query.all_query(), 10**4).hits]
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("uko_uri", stored=True, tokenizer_name="raw")
        builder.add_text_field("resource_id", stored=True, tokenizer_name="raw")
        builder.add_text_field("content", tokenizer_name=ANALYZER_NAME)
        builder.add_text_field("path", tokenizer_name=ANALYZER_NAME)
        builder.add_bytes_field("body", stored=True, indexed=False)
        builder.add_bytes_field("metadata", stored=True, indexed=False)
        for name in os.listdir(shard):
            os.remove(shard / name)
        old = tantivy.Index(builder.build(), path=str(shard))
        old.register_tokenizer(ANALYZER_NAME, code_analyzer())
        writer = old.writer(15_000_000, 1)
        for doc in docs:
            fresh = tantivy.Document()
            for field in ("uko_uri", "resource_id"):
                fresh.add_text(field, doc.get_first(field))
            body = bytes(doc.get_first("body"))
            metadata = json.loads(bytes(doc.get_first("metadata")))
            fresh.add_text("content", body.decode())
            fresh.add_text("path", metadata.get("path", ""))
            fresh.add_bytes("body", body)
            fresh.add_bytes("metadata", bytes(doc.get_first("metadata")))
            writer.add_document(fresh)
        writer.commit()
        writer.wait_merging_threads()
    return shards


def test_a_normal_reindex_upgrades_shards_of_the_previous_schema(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("upgrade")
    cli = Cli(base / "data")
    src = write_project(base / "src")
    cli.ok("project", "add", "local/net")
    cli.ok("resource", "add", str(src), "--project", "local/net")
    cli.reindex()
    # A previous version: an old text schema, the units identity before "units-5".
    shards = _old_schema_shards(cli.data_dir / "text")
    assert shards
    catalog = sqlite3.connect(next((cli.data_dir / "catalog").resolve().glob("*.sqlite3")))
    with catalog:
        catalog.execute(
            "UPDATE meta SET value = replace(value, 'units-5', 'units-4') "
            "WHERE key LIKE 'identity:%'"
        )
    catalog.close()

    done = cli.run("search", "text", "create_connection", *SCOPE)
    assert done.returncode == 1, done.stderr
    assert "scripts/reindex.py --rebuild" in done.stderr

    cli.reindex()  # a normal reindex, no --rebuild
    for shard in shards:
        meta = json.loads((shard / "meta.json").read_text())
        assert {"symbol", "symbol_exact", "symbol_case", "names", "calls", "path_raw", "lang"} <= {
            f["name"] for f in meta["schema"]
        }
    hits = cli.json("search", "text", "create_connection", *SCOPE, "--lang", "python")
    assert hits[0]["metadata"]["path"] == "net/base.py"


def test_every_search_takes_max_results_and_hybrid_offers_no_query_language(cli: Cli) -> None:
    vector = json.loads(
        cli.ok(
            "--json",
            "search",
            "vector",
            "open a socket",
            "--max-results",
            "1",
            "--project",
            "local/net",
        )
    )
    assert len(vector) == 1
    usage = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", "search", "hybrid", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--syntax" not in usage and "--max-results" in usage
