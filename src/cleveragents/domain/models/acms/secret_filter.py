"""The default deny-list of secret files, applied when a resource is listed.

A file the list matches is left out of the listing itself: it is never
opened, read, stored as a tier fragment or indexed, so no search, SPARQL
query or context tier can return it.  Each skip is logged
(``context_hydrator.file_skipped``, ``reason="secret"``, with the matching
``rule``) and counted (``IndexStats.skipped["secret"]``, shown by ``reindex``
and ``status``).

Where the list comes from
-------------------------
Secret scanners look for secrets in two ways: by *file name* (gitleaks'
``pkcs12-file`` path rule; the filename signatures of shhgit, gitrob and
Sourcegraph-style "sensitive file" searches: ``*_rsa``, ``.npmrc``,
``.pypirc``, ``.netrc``, ``.htpasswd``, ``.dockercfg``, ``.s3cfg``,
``*.kdbx``, ``*.ppk``, ``terraform.tfstate``) and by *content* (gitleaks,
trufflehog and GitHub secret scanning match token formats such as ``AKIA...``
or a PEM "BEGIN RSA PRIVATE KEY" header).  Code assistants that index a
repository ship a deny-list by name for the same reason we do (Continue's
``DEFAULT_SECURITY_IGNORE_FILETYPES``: ``.env*``, ``*.key``, ``*.pem``,
``*.p12``, ``*.pfx``, ``*.jks``, ``*.keystore``); ripgrep and zoekt skip
hidden files by default, which happens to leave out most dot-file
credentials.  Name rules are what this module applies: they are decided before
any byte is read, cost one regex match per path, and cannot be defeated by an
encoding the content scanner does not know.

The rules (case-insensitive; a pattern without ``/`` matches the file name,
one with ``/`` matches the trailing components of the path):

==================================== =========================================
pattern                              why
==================================== =========================================
``.env``, ``.env.*``, ``*.env``,     environment files: API keys, database
``.envrc``                           URLs with passwords (dotenv, direnv)
``*.pem``, ``*.key``, ``*.p8``       PEM/PKCS#8 private keys (TLS, Apple)
``*.p12``, ``*.pfx``, ``*.pkcs12``   PKCS#12 bundles: key + certificate
``*.jks``, ``*.keystore``            Java / Android keystores
``*.ppk``                            PuTTY private keys
``id_rsa*``, ``id_dsa*``,            OpenSSH key pairs (the ``.pub`` halves
``id_ecdsa*``, ``id_ed25519*``,      too: harmless to skip, and a private
``*_rsa``, ``*_dsa``, ``*_ecdsa``,   key is often saved beside them under a
``*_ed25519``, ``.ssh/*``            custom name)
``*.kdbx``, ``*.kdb``, ``*.keychain``   password databases (KeePass, macOS)
``.npmrc``, ``.pypirc``, ``.netrc``, registry and HTTP credentials (npm, PyPI,
``_netrc``, ``.git-credentials``,    curl/ftp, git's credential store,
``.pgpass``, ``.my.cnf``, ``.s3cfg``, PostgreSQL, MySQL, s3cmd, boto, Vault,
``.boto``, ``.vault-token``,         Docker)
``.dockercfg``
``.htpasswd``                        web server password hashes
``credentials``, ``.credentials``,   cloud SDK credential files
``credentials*.json``,               (``gcloud``, Terraform Cloud's
``credentials*.yml``/``.yaml``,      ``credentials.tfrc.json``, AWS)
``credentials*.toml``
``client_secret*.json``              Google OAuth client secrets
``*service-account*.json``,          GCP service-account keys (the usual
``*service_account*.json``,          names given to the downloaded JSON)
``*serviceaccount*.json``
``.aws/credentials``,                tool credential stores kept in a
``.docker/config.json``,             checkout's home-like directories
``.kube/config``,
``.cargo/credentials*``,
``.gem/credentials``, ``.gnupg/*``
``*.tfstate``, ``*.tfstate.*``,      Terraform state holds every resource's
``*.tfvars``                         secrets in plain text; tfvars their inputs
``.*_history``                       shell and REPL history (tokens typed on
                                     a command line)
==================================== =========================================

Exceptions: ``.env.example``, ``.env.sample``, ``.env.template`` and
``.env.dist`` are *not* skipped.  They are the committed templates that
document which variables a project reads, meant to hold placeholders, and an
agent that cannot see them cannot help configure the project (gitsafe and
most dotenv tooling treat them the same way).  A template that does hold a
real value is a leak already published with the repository.

Content scanning
----------------
A file the name rules let through is still checked, once read and before it
is stored or indexed, for token formats that are secrets with near
certainty (the prefixes gitleaks, trufflehog and GitHub secret scanning key
on): PEM and PGP private key headers, AWS access key ids (``AKIA``, and
``ASIA`` for temporary ones, except AWS's documented ``...EXAMPLE`` keys),
GitHub personal access tokens (``ghp_``, ``github_pat_``), GitLab
(``glpat-``), Slack (``xoxb-``, ``xoxp-``, ...), Stripe live keys
(``sk_live_``) and PyPI (``pypi-AgEI...``) tokens: each
costs one substring search per file (about 400 MB/s here), so the list is
kept to the kinds most often committed.  Such a file is skipped whole
(``reason="secret_content"``, counted with the other secrets).  Generic
"password = ..." heuristics are left out on purpose: they would drop
ordinary code.  A file indexed before this check existed is re-checked when
it changes, on ``reindex --full``, or on the first reindex after
:data:`SECRET_RULES_VERSION` changes.

The operator can change the list per resource (stored in the registry):
``acms resource add PATH --allow-secret-pattern GLOB`` (repeatable; same
matching rules) lets matching files through, and ``--no-secret-filter``
turns the list off for that resource (names and content alike); a file an
allow pattern names is not content-scanned either.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_SECRET_FILTER",
    "DEFAULT_SECRET_RULES",
    "SECRET_RULES_VERSION",
    "SECRET_TEMPLATES",
    "SECRET_TOKEN_KINDS",
    "SecretFilter",
    "SecretRule",
    "secret_filter_of",
    "validate_allow_patterns",
]


@dataclass(frozen=True, slots=True)
class SecretRule:
    """One deny-list entry: a glob and the reason it is there."""

    pattern: str
    reason: str


def _rules(reason: str, *patterns: str) -> tuple[SecretRule, ...]:
    return tuple(SecretRule(p, reason) for p in patterns)


DEFAULT_SECRET_RULES: tuple[SecretRule, ...] = (
    *_rules("environment file", ".env", ".env.*", "*.env", ".envrc"),
    *_rules("private key", "*.pem", "*.key", "*.p8", "*.ppk"),
    *_rules("key bundle", "*.p12", "*.pfx", "*.pkcs12", "*.jks", "*.keystore"),
    *_rules(
        "ssh key",
        "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
        "*_rsa", "*_dsa", "*_ecdsa", "*_ed25519",
        ".ssh/*",
    ),
    *_rules("password database", "*.kdbx", "*.kdb", "*.keychain"),
    *_rules(
        "credential file",
        ".npmrc", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".pgpass", ".my.cnf",
        ".s3cfg", ".boto", ".vault-token", ".dockercfg", ".htpasswd",
        "credentials", ".credentials", "credentials*.json", "credentials*.yml",
        "credentials*.yaml", "credentials*.toml", "client_secret*.json",
    ),
    *_rules(
        "service account key",
        "*service-account*.json", "*service_account*.json", "*serviceaccount*.json",
    ),
    *_rules(
        "tool credential store",
        ".aws/credentials", ".docker/config.json", ".kube/config", ".cargo/credentials*",
        ".gem/credentials", ".gnupg/*",
    ),
    *_rules("terraform state or variables", "*.tfstate", "*.tfstate.*", "*.tfvars"),
    *_rules("shell history", ".*_history"),
)  # fmt: skip
"""The default deny-list (see the module docstring for the reasons)."""

SECRET_TEMPLATES: frozenset[str] = frozenset(
    {".env.example", ".env.sample", ".env.template", ".env.dist"}
)
"""File names that look like environment files but are committed templates."""

# High-confidence token formats: (kind, description, literal anchors, regex).
# A regex runs only on data holding one of its anchors (a substring search is
# ~1000x faster than the regex scan).  Written so this file does not match.
_TOKENS: tuple[tuple[str, str, tuple[bytes, ...], bytes], ...] = (
    ("private_key", "PEM private key", (b"PRIVATE KEY-", b"PRIVATE KEY BLOCK-"),
     rb"-----BEGIN[ A-Z0-9]{0,24}PRIVATE KEY(?: BLOCK)?-----"),
    ("aws_key_id", "AWS access key id", (b"AKIA", b"ASIA"),
     rb"\b(?:AKIA|ASIA)(?![0-9A-Z]{9}EXAMPLE)[0-9A-Z]{16}\b"),
    ("github_token", "GitHub personal access token", (b"ghp_",), rb"\bghp_[A-Za-z0-9]{36}\b"),
    ("github_pat", "GitHub fine-grained token", (b"github_pat_",),
     rb"\bgithub_pat_[A-Za-z0-9_]{82}\b"),
    ("gitlab_token", "GitLab token", (b"glpat-",), rb"\bglpat-[A-Za-z0-9_-]{20}\b"),
    ("slack_token", "Slack token", (b"xox",), rb"\bxox[baprs]-[A-Za-z0-9-]{10,250}"),
    ("stripe_key", "Stripe live secret key", (b"sk_live_",), rb"\bsk_live_[A-Za-z0-9]{24,99}\b"),
    ("pypi_token", "PyPI token", (b"pypi-AgEI",), rb"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),
)  # fmt: skip
SECRET_RULES_VERSION = "secrets-2"
"""Bumped when the default rules find more (2: PGP private keys, ``ASIA``
key ids): part of the indexer's identity, so the next reindex reads every
file again and drops what the new rules deny."""
_TOKEN_CHECKS = tuple((name, anchors, re.compile(rx)) for name, _, anchors, rx in _TOKENS)
SECRET_TOKEN_KINDS: dict[str, str] = {name: label for name, label, _, _ in _TOKENS}
"""The token kinds content scanning knows: kind -> description."""

_MAX_ALLOW_PATTERNS = 100
_MAX_PATTERN_CHARS = 200


def validate_allow_patterns(patterns: Iterable[object]) -> tuple[str, ...]:
    """Check operator allow-globs; return them as a tuple, in order, without duplicates.

    Raises:
        TypeError: a pattern is not a str.
        ValueError: an empty or over-long pattern, one with a NUL or a control
            character, or more than 100 patterns.
    """
    seen: dict[str, None] = {}
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"a secret allow-pattern must be a str, not {type(pattern).__name__}")
        if not pattern.strip() or len(pattern) > _MAX_PATTERN_CHARS:
            raise ValueError(
                f"a secret allow-pattern must be 1-{_MAX_PATTERN_CHARS} characters, "
                f"got {len(pattern)}"
            )
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in pattern):
            raise ValueError("a secret allow-pattern must not contain control characters")
        seen[pattern] = None
    if len(seen) > _MAX_ALLOW_PATTERNS:
        raise ValueError(f"at most {_MAX_ALLOW_PATTERNS} secret allow-patterns")
    return tuple(seen)


def _compile(patterns: Iterable[str]) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    """One regex for the name patterns, one for the path patterns (None if none).

    A path pattern matches the trailing components of a path: it is compiled
    behind an optional ``anything/`` prefix, so one match per path does it.
    """
    names: list[str] = []
    paths: list[str] = []
    for pattern in patterns:
        (paths if "/" in pattern else names).append(fnmatch.translate(pattern.lower()))
    name_re = re.compile("|".join(names)) if names else None
    path_re = re.compile("(?s:(?:.*/)?)(?:" + "|".join(paths) + ")") if paths else None
    return name_re, path_re


_WILDCARDS = re.compile(r"[*?\[\]]")


@dataclass(frozen=True, slots=True)
class _Gate:
    """A cheap necessary condition for any of a set of globs to match a path.

    Every translated glob is anchored at the end of the path, so a pattern
    with a literal tail (``*.pem``, ``.npmrc``) matches only paths ending in
    it (``tails``, by their last character: one ``str.endswith`` over the
    few sharing the path's).  A name pattern ending in a wildcard but
    starting with a literal (``id_rsa*``) needs a file name starting with it
    (``heads``); any other pattern needs its longest literal run somewhere
    in the path (``needles``: ``.ssh/``); a pattern with no literal at all
    (``*``) lets every path through (``always``).  Most paths fail the gate,
    so the full match (whose leading ``.*`` branches cost a backtracking
    pass each) runs only for the few that pass.  Patterns and paths are
    lowered.
    """

    tails: dict[str, tuple[str, ...]]
    heads: tuple[str, ...]
    needles: tuple[str, ...]
    always: bool

    @classmethod
    def of(cls, patterns: Iterable[str]) -> _Gate:
        tails: dict[str, tuple[str, ...]] = {}
        heads: list[str] = []
        needles: list[str] = []
        always = False
        for pattern in patterns:
            lowered = pattern.lower()
            parts = _WILDCARDS.split(lowered)
            # After the last wildcard or bracket every character is literal (a
            # set cannot still be open there; an unclosed '[' is literal
            # itself); so is everything before the first one.
            tail = parts[-1]
            if tail:
                if tail not in tails.get(tail[-1], ()):
                    tails[tail[-1]] = (*tails.get(tail[-1], ()), tail)
            elif parts[0] and "/" not in lowered:
                heads.append(parts[0])
            else:
                runs = parts[:1] if "[" in lowered else re.split(r"[*?]", lowered)
                needle = max(runs, key=len)
                if needle:
                    needles.append(needle)
                else:
                    always = True
        return cls(tails, tuple(heads), tuple(needles), always)

    def any_needle(self, lowered: str) -> bool:
        """True when a needle occurs in ``lowered`` (the rest of the gate is
        inlined in :meth:`SecretFilter.rule_for`, which runs once per file)."""
        for needle in self.needles:  # noqa: SIM110 - a loop beats any() here
            if needle in lowered:
                return True
        return False


def _matches(
    name_re: re.Pattern[str] | None, path_re: re.Pattern[str] | None, rel_path: str
) -> bool:
    lowered = rel_path.lower()
    if name_re is not None and name_re.match(lowered.rpartition("/")[2]):
        return True
    return path_re is not None and path_re.match(lowered) is not None


class SecretFilter:
    """Decides, from a path alone, whether a file is a secret to leave out.

    Args:
        enabled: False turns the filter off (``--no-secret-filter``).
        allow: Operator globs (same matching rules as the deny-list) whose
            files are let through even when a rule matches.
        rules: The deny-list; the default is :data:`DEFAULT_SECRET_RULES`.

    Raises:
        TypeError / ValueError: a bad allow pattern (see
            :func:`validate_allow_patterns`).
    """

    __slots__ = (
        "_allow_name",
        "_allow_path",
        "_each",
        "_gate",
        "_name_re",
        "_path_re",
        "_rules",
        "allow",
        "enabled",
    )

    def __init__(
        self,
        *,
        enabled: bool = True,
        allow: Iterable[str] = (),
        rules: Iterable[SecretRule] = DEFAULT_SECRET_RULES,
    ) -> None:
        self.enabled = bool(enabled)
        self.allow = validate_allow_patterns(allow)
        rules = tuple(rules)
        self._name_re, self._path_re = _compile(r.pattern for r in rules)
        self._gate = _Gate.of(r.pattern for r in rules)
        # One regex per rule, to name the rule that matched: compiled on the
        # first match (57 compiles, ~20 ms of every process's start).
        self._rules = rules
        self._each: tuple[tuple[SecretRule, re.Pattern[str] | None, re.Pattern[str] | None], ...]
        self._each = ()
        self._allow_name, self._allow_path = _compile(self.allow)

    def __repr__(self) -> str:
        return f"SecretFilter(enabled={self.enabled}, allow={self.allow!r})"

    def rule_for(self, rel_path: str) -> SecretRule | None:
        """The deny rule that leaves ``rel_path`` out, or None if the file may be read.

        Args:
            rel_path: A POSIX path relative to the resource root.
        """
        if not self.enabled:
            return None
        lowered, gate = rel_path.lower(), self._gate
        # The gate, inlined: listing calls this once per file of a resource.
        if not (
            gate.always
            or lowered.endswith(gate.tails.get(lowered[-1:], ()))
            or lowered.startswith(gate.heads, lowered.rfind("/") + 1)
            or gate.any_needle(lowered)
        ):
            return None
        if not _matches(self._name_re, self._path_re, rel_path):
            return None
        if rel_path.rpartition("/")[2].lower() in SECRET_TEMPLATES:
            return None
        if _matches(self._allow_name, self._allow_path, rel_path):
            return None
        if not self._each:
            self._each = tuple((rule, *_compile([rule.pattern])) for rule in self._rules)
        for rule, name_re, path_re in self._each:
            if _matches(name_re, path_re, rel_path):
                return rule
        return None  # pragma: no cover - the combined regex matched one of them

    def content_rule(self, rel_path: str, data: bytes) -> str | None:
        """The kind of high-confidence secret token ``data`` holds, or None.

        None as well when the filter is off or an allow pattern names
        ``rel_path`` (the operator let that file in on purpose).

        Args:
            rel_path: The file's POSIX path relative to the resource root.
            data: The bytes about to be stored or indexed.
        """
        if not self.enabled:
            return None
        for kind, anchors, regex in _TOKEN_CHECKS:
            if any(anchor in data for anchor in anchors) and regex.search(data):
                if _matches(self._allow_name, self._allow_path, rel_path):
                    return None
                return kind
        return None

    def is_secret(self, rel_path: str) -> bool:
        """True when ``rel_path`` must not be read (see :meth:`rule_for`)."""
        return self.rule_for(rel_path) is not None

    def describe(self) -> dict[str, object]:
        """The filter's settings as plain data (for ``status``)."""
        return {"enabled": self.enabled, "allow": list(self.allow)}


DEFAULT_SECRET_FILTER = SecretFilter()
"""The filter every listing applies unless a resource's registry row says otherwise."""


def secret_filter_of(resource: object) -> SecretFilter:
    """The filter a registered resource asks for (its ``secret_filter`` and
    ``secret_allow`` attributes; the default list when it has neither)."""
    enabled = getattr(resource, "secret_filter", True)
    allow = tuple(getattr(resource, "secret_allow", ()) or ())
    if enabled is True and not allow:
        return DEFAULT_SECRET_FILTER
    return SecretFilter(enabled=bool(enabled), allow=allow)
