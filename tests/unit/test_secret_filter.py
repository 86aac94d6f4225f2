"""The secret deny-list: what it leaves out, what it lets through, and the override."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.registry import Resource
from cleveragents.domain.models.acms.secret_filter import (
    DEFAULT_SECRET_FILTER,
    DEFAULT_SECRET_RULES,
    SECRET_TEMPLATES,
    SECRET_TOKEN_KINDS,
    SecretFilter,
    SecretRule,
    secret_filter_of,
    validate_allow_patterns,
)

# One path per kind the issue names, and the conventions found in secret scanners.
SECRETS = [
    ".env",
    ".env.local",
    ".env.production",
    "config/prod.env",
    ".envrc",
    "certs/server.pem",
    "tls/private.key",
    "AuthKey_ABC123.p8",
    "keys/putty.ppk",
    "id_rsa",
    "id_rsa.pub",
    "home/.ssh/id_ed25519",
    "id_ecdsa",
    "id_dsa",
    "deploy_rsa",
    "github_ed25519",
    ".ssh/config",
    ".npmrc",
    "frontend/.npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    ".vault-token",
    ".dockercfg",
    ".htpasswd",
    "credentials.json",
    "credentials-prod.json",
    "gcloud/credentials.yaml",
    "ci/credentials.yml",
    "cloud/.credentials",
    "client_secret_1234.apps.googleusercontent.com.json",
    "my-project-service-account.json",
    "gcp_service_account_key.json",
    "serviceAccount.json",
    "cert.p12",
    "cert.pfx",
    "bundle.pkcs12",
    "release.jks",
    "android/app/debug.keystore",
    "vault.kdbx",
    "old.kdb",
    "login.keychain",
    ".aws/credentials",
    "home/user/.aws/credentials",
    "credentials",
    ".docker/config.json",
    ".kube/config",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".gnupg/secring.gpg",
    "infra/terraform.tfstate",
    "infra/terraform.tfstate.backup",
    "infra/prod.tfvars",
    ".bash_history",
    ".python_history",
]

# Ordinary project files whose names come close.
ORDINARY = [
    "src/env.py",
    "src/environment.ts",
    ".envoy.yaml",
    "keys.py",
    "src/crypto/key.rs",
    "credentials.py",
    "auth/credentials_test.go",
    "config.json",
    "package.json",
    ".npmignore",
    "docs/ssh.md",
    "id.py",
    "rsa.py",
    "tests/test_rsa.py",
    "public.crt",
    ".gitignore",
    "README.md",
    "Dockerfile",
    "docker/config.yaml",
    ".aws/config",
    "terraform/main.tf",
    "history.py",
    "service_account.py",
    *sorted(SECRET_TEMPLATES),
    "app/.env.example",
]


@pytest.mark.parametrize("path", SECRETS)
def test_each_secret_kind_is_denied(path: str) -> None:
    rule = DEFAULT_SECRET_FILTER.rule_for(path)
    assert rule is not None, path
    assert rule in DEFAULT_SECRET_RULES and rule.reason


@pytest.mark.parametrize("path", ORDINARY)
def test_ordinary_files_and_env_templates_are_let_through(path: str) -> None:
    assert DEFAULT_SECRET_FILTER.rule_for(path) is None, path


def test_matching_ignores_case() -> None:
    for path in ("SERVER.PEM", ".ENV", "Id_Rsa", ".AWS/Credentials", "App/.NPMRC"):
        assert DEFAULT_SECRET_FILTER.is_secret(path), path


@pytest.mark.parametrize("rule", DEFAULT_SECRET_RULES, ids=lambda r: r.pattern)
def test_every_rule_has_a_reason_and_an_example_here(rule: SecretRule) -> None:
    alone = SecretFilter(rules=[rule])
    assert rule.reason
    assert any(alone.is_secret(p) for p in SECRETS), rule.pattern


def test_allow_patterns_let_matching_files_through_only() -> None:
    f = SecretFilter(allow=["certs/*.pem", ".npmrc"])
    assert f.rule_for("certs/server.pem") is None
    assert f.rule_for("frontend/.npmrc") is None
    assert f.rule_for("other/server.pem") is not None
    assert f.rule_for(".env") is not None
    assert f.describe() == {"enabled": True, "allow": ["certs/*.pem", ".npmrc"]}


def test_a_disabled_filter_denies_nothing() -> None:
    off = SecretFilter(enabled=False)
    assert not any(off.is_secret(p) for p in SECRETS)
    assert off.describe() == {"enabled": False, "allow": []}


@pytest.mark.parametrize(
    ("patterns", "error"),
    [
        (["ok", 3], TypeError),
        ([""], ValueError),
        (["  "], ValueError),
        (["a" * 201], ValueError),
        (["a\nb"], ValueError),
        (["a\x1b[31m"], ValueError),
        ([f"p{i}" for i in range(101)], ValueError),
    ],
)
def test_bad_allow_patterns_are_refused(patterns: list[object], error: type[Exception]) -> None:
    with pytest.raises(error):
        validate_allow_patterns(patterns)
    with pytest.raises(error):
        SecretFilter(allow=patterns)  # type: ignore[arg-type]


def test_allow_patterns_are_kept_in_order_without_duplicates() -> None:
    assert validate_allow_patterns(["b", "a", "b"]) == ("b", "a")


def test_filter_of_a_resource_reads_its_override() -> None:
    plain = Resource("01JD5TD11B0000000000000000", "/x", "directory")
    assert secret_filter_of(plain) is DEFAULT_SECRET_FILTER
    assert secret_filter_of(object()) is DEFAULT_SECRET_FILTER  # a duck-typed record
    off = Resource("01JD5TD11B0000000000000000", "/x", "directory", secret_filter=False)
    assert not secret_filter_of(off).is_secret(".env")
    allow = Resource("01JD5TD11B0000000000000000", "/x", "git", secret_allow=("*.pem",))
    assert not secret_filter_of(allow).is_secret("a.pem")
    assert secret_filter_of(allow).is_secret(".env")


_component = st.text(
    alphabet=st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
).filter(lambda c: c not in (".", ".."))


@settings(max_examples=300, deadline=None)
@given(prefix=st.lists(_component, max_size=4), secret=st.sampled_from(SECRETS))
def test_a_secret_is_denied_under_any_directory(prefix: list[str], secret: str) -> None:
    """Name and path rules match the trailing components: no parent directory
    (however named) hides a secret."""
    path = "/".join([*prefix, secret])
    assert DEFAULT_SECRET_FILTER.is_secret(path), path


@settings(max_examples=300, deadline=None)
@given(prefix=st.lists(_component, max_size=4), name=st.sampled_from(ORDINARY))
def test_an_ordinary_file_is_let_through_under_an_ordinary_directory(
    prefix: list[str], name: str
) -> None:
    # A parent named like a secret directory (.ssh, .aws, ...) may deny it: skip those.
    sensitive = {".ssh", ".gnupg", ".aws", ".docker", ".kube", ".cargo", ".gem"}
    if any(c.lower() in sensitive for c in prefix):
        return
    path = "/".join([*prefix, name])
    assert not DEFAULT_SECRET_FILTER.is_secret(path), path


# Tokens assembled at run time, so this file holds none.
TOKENS = {
    "private_key": b"-----BEGIN OPENSSH " + b"PRIVATE KEY-----\nb3Blbn\n",
    "aws_key_id": b"aws_access_key_id = AKIA" + b"Q3EGRL5ZXN7MVB2H\n",
    "github_token": b"token: ghp_" + b"a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8\n",
    "github_pat": b"github_pat_" + b"1" * 22 + b"_" + b"A" * 59 + b"\n",
    "gitlab_token": b"CI_TOKEN=glpat-" + b"abcdefghij0123456789\n",
    "slack_token": b"SLACK=xoxp-" + b"1234567890-abcdef\n",
    "stripe_key": b"STRIPE=sk_live_" + b"4eC39HqLyjWDarjtT1zdp7dc\n",
    "pypi_token": b"password = pypi-AgEIcHlwaS5vcmc" + b"x" * 60 + b"\n",
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_each_token_kind_is_found_in_content(kind: str) -> None:
    data = b"# settings\nDEBUG = True\n" + TOKENS[kind] + b"more = 1\n"
    assert kind in SECRET_TOKEN_KINDS
    assert DEFAULT_SECRET_FILTER.content_rule("src/settings.py", data) == kind


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        # A PGP secret key's armour says "KEY BLOCK", never "KEY-----".
        ("private_key", b"-----BEGIN PGP " + b"PRIVATE KEY BLOCK-----\n\nlQOYBF0\n"),
        ("private_key", b"-----BEGIN RSA " + b"PRIVATE KEY-----\nMIIE\n"),
        ("aws_key_id", b"AWS_ACCESS_KEY_ID=ASIA" + b"Q3EGRL5ZXN7MVB2H\n"),  # temporary
    ],
)
def test_other_shapes_of_a_token_kind_are_found(kind: str, data: bytes) -> None:
    assert DEFAULT_SECRET_FILTER.content_rule("notes.py", b"x = 1\n" + data) == kind


@pytest.mark.parametrize(
    "data",
    [
        b"AKIAIOSFODNN7EXAMPLE  # AWS's documented example key",
        b"ASIAIOSFODNN7EXAMPLE  # the same, temporary",
        b"-----BEGIN PGP PUBLIC KEY BLOCK-----\nmQIN\n",
        b"ASIAN markets; ASIA_PACIFIC region",
        b"prefix = 'AKIA'  # too short",
        b"the ghp_ prefix marks a GitHub token",
        b"-----BEGIN PUBLIC KEY-----\nMIIB\n",
        b"-----BEGIN CERTIFICATE-----\nMIIB\n",
        b"xoxo, see you",
        b"def private_key(self): return self._key",
        b"sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        b"",
    ],
)
def test_look_alikes_are_not_secrets(data: bytes) -> None:
    assert DEFAULT_SECRET_FILTER.content_rule("notes.md", data) is None


def test_content_scanning_obeys_the_override() -> None:
    data = TOKENS["aws_key_id"]
    assert SecretFilter(enabled=False).content_rule("a.py", data) is None
    assert SecretFilter(allow=["fixtures/*"]).content_rule("fixtures/a.py", data) is None
    assert SecretFilter(allow=["fixtures/*"]).content_rule("src/a.py", data) == "aws_key_id"


@settings(max_examples=200, deadline=None)
@given(
    before=st.binary(max_size=200),
    after=st.binary(max_size=200),
    kind=st.sampled_from(sorted(TOKENS)),
)
def test_a_token_is_found_whatever_surrounds_it(before: bytes, after: bytes, kind: str) -> None:
    data = before + b"\n" + TOKENS[kind] + after
    assert DEFAULT_SECRET_FILTER.content_rule("x", data) is not None


# ------------------------------------------------ the gate in front of the regexes


def _rule_for_oracle(rules: list[SecretRule], path: str) -> SecretRule | None:
    """What ``rule_for`` answers with no allow patterns, by ``fnmatch``, rule by
    rule: a name pattern against the file name, a path pattern against every
    run of trailing components (the documented matching rules)."""
    lowered = path.lower()
    name = lowered.rpartition("/")[2]
    if name in SECRET_TEMPLATES:
        return None
    parts = lowered.split("/")
    for rule in rules:
        pattern = rule.pattern.lower()
        if "/" in pattern:
            hit = any(fnmatch.fnmatchcase("/".join(parts[i:]), pattern) for i in range(len(parts)))
        else:
            hit = fnmatch.fnmatchcase(name, pattern)
        if hit:
            return rule
    return None


# Characters that are glob syntax, path syntax, and case-folding oddities
# ('İ' lowers to two characters, 'K' is the Kelvin sign).
_GLOB_CHARS = "ab.*?[]!-/_İKk"
_FRAGMENTS = [
    ".env", ".env.local", "id_rsa", "id_rsa.pub", ".ssh", "x.pem", "a.TFSTATE.1",
    "credentials", "Credentials.JSON", ".gnupg", "x_history", "a", "b.py", "[a]", "*",
]  # fmt: skip
_path_component = st.sampled_from(_FRAGMENTS) | st.text(alphabet=_GLOB_CHARS, max_size=6)


@settings(max_examples=500, deadline=None)
@given(
    patterns=st.lists(
        st.text(alphabet=_GLOB_CHARS, min_size=1, max_size=8) | st.sampled_from(_FRAGMENTS),
        min_size=1,
        max_size=6,
    ),
    components=st.lists(_path_component, min_size=1, max_size=4),
)
def test_rule_for_equals_fnmatch_rule_by_rule(patterns: list[str], components: list[str]) -> None:
    """The literal-tail/head/needle gate only skips paths no rule can match:
    any globs, any paths, the same first matching rule as fnmatch."""
    rules = [SecretRule(p, f"rule {i}") for i, p in enumerate(patterns)]
    path = "/".join(components)
    assert SecretFilter(rules=rules).rule_for(path) == _rule_for_oracle(rules, path)


@settings(max_examples=500, deadline=None)
@given(components=st.lists(_path_component | _component, min_size=1, max_size=5))
def test_default_rule_for_equals_fnmatch(components: list[str]) -> None:
    path = "/".join(components)
    expected = _rule_for_oracle(list(DEFAULT_SECRET_RULES), path)
    assert DEFAULT_SECRET_FILTER.rule_for(path) == expected
