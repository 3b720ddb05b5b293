"""Config loading: one clear message naming the key and the line; hashes never see secrets."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rag_engine.config import config_hash, load_config
from rag_engine.errors import ConfigError
from tests.conftest import SENTINEL

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "config" / "engine.yaml").read_text()


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "engine.yaml"
    p.write_text(text)
    return p


def _line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def test_shipped_config_loads():
    cfg = load_config(ROOT / "config" / "engine.yaml")
    assert [p.name for p in cfg.enabled_packs] == ["legal_regulatory", "company_x_kb", "adgm_rulebooks"]
    assert cfg.model("hash-embed-384").dimension == 384


def test_unknown_key_names_key_and_line(tmp_path):
    text = BASE.replace("  final_k: 10\n", "  final_k: 10\n  finl_k: 3\n")
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, text))
    msg = str(exc.value)
    assert f"engine.yaml:{_line_of(text, 'finl_k')}: retrieval.finl_k: unknown key" in msg
    assert msg.count("\n") == 1  # one problem, one line


def test_wrong_type_names_key_and_line(tmp_path):
    text = BASE.replace("  max_depth: 2\n", "  max_depth: deep\n")
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, text))
    assert f"engine.yaml:{_line_of(text, 'max_depth: deep')}: traversal.max_depth:" in str(exc.value)
    assert "integer" in str(exc.value)


def test_nested_list_item_error_points_into_the_list(tmp_path):
    text = BASE.replace("    dimension: 384\n", "    dimension: -1\n")
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, text))
    assert f":{_line_of(text, 'dimension: -1')}: models.0.dimension" in str(exc.value)


def test_missing_file_is_one_clear_message(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.yaml"):
        load_config(tmp_path / "nope.yaml")


def test_invalid_yaml_reports_line(tmp_path):
    text = BASE.replace("  final_k: 10\n", "  final_k: [10\n")
    with pytest.raises(ConfigError, match=r"engine.yaml:\d+: not valid YAML"):
        load_config(_write(tmp_path, text))


def test_secret_value_is_rejected_where_an_env_name_belongs(tmp_path):
    text = BASE.replace("credential_env: OPENAI_API_KEY", f"credential_env: {SENTINEL}")
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, text))
    assert "environment variable NAME" in str(exc.value)
    assert SENTINEL not in str(exc.value)


def test_config_hash_is_stable_and_ignores_environment_values(tmp_path, monkeypatch):
    cfg = load_config(ROOT / "config" / "engine.yaml")
    before = config_hash(cfg)
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    assert config_hash(load_config(ROOT / "config" / "engine.yaml")) == before
    # a change of substance changes the hash
    changed = _write(tmp_path, BASE.replace("  final_k: 10\n", "  final_k: 11\n"))
    assert config_hash(load_config(changed)) != before


def test_config_hash_redacts_credentials_embedded_in_endpoints(tmp_path):
    plain = load_config(_write(tmp_path, BASE))
    leaky = BASE.replace(
        "endpoint: http://127.0.0.1:8080/v1", f"endpoint: http://user:{SENTINEL}@127.0.0.1:8080/v1?key={SENTINEL}"
    )
    leaky_cfg = load_config(_write(tmp_path, leaky))
    assert config_hash(leaky_cfg) == config_hash(plain)


def test_config_models_are_frozen():
    cfg = load_config(ROOT / "config" / "engine.yaml")
    with pytest.raises(ValidationError, match="frozen"):
        cfg.retrieval.final_k = 3  # type: ignore[misc]
    assert yaml.safe_load(BASE)["version"] == 1


def _with_serving(tmp_path: Path, serving: dict) -> Path:
    cfg = yaml.safe_load(BASE)
    cfg["serving"] = serving
    return _write(tmp_path, yaml.safe_dump(cfg, sort_keys=False))


def test_the_operator_role_is_held_beside_retrieval_roles_and_is_none_itself(tmp_path):
    from rag_engine.errors import Forbidden
    from rag_engine.governance.principals import PrincipalRegistry, key_digest

    ops = {"id": "ops-1", "roles": ["operator", "employee"], "key_sha256_env": "OPS_SHA"}
    cfg = load_config(_with_serving(tmp_path, {"principals": [ops]}))
    assert cfg.serving.operator_role == "operator"
    principal = PrincipalRegistry(cfg, ROOT, {"OPS_SHA": key_digest("k" * 40)}).authenticate("k" * 40)
    assert principal.operator and principal.roles == ("employee",)  # no query runs under the operator role
    with pytest.raises(Forbidden):
        principal.role("operator")
    only_ops = {**ops, "roles": ["operator"]}
    cfg = load_config(_with_serving(tmp_path, {"principals": [only_ops]}))
    with pytest.raises(Forbidden, match="no retrieval role"):
        PrincipalRegistry(cfg, ROOT, {"OPS_SHA": key_digest("k" * 40)}).authenticate("k" * 40).role(None)
    with pytest.raises(ConfigError, match="also a retrieval role"):
        load_config(_with_serving(tmp_path, {"operator_role": "employee", "principals": [ops]}))
    with pytest.raises(ConfigError, match="unknown role"):  # a renamed operator role is not a free pass
        load_config(_with_serving(tmp_path, {"operator_role": "ops", "principals": [ops]}))


def test_no_principal_may_take_the_eval_actor():
    """Eval traffic is audited and metered as actor ``eval``: a principal of that name would pass for it."""
    from rag_engine.config import PrincipalConfig
    from rag_engine.usage import EVAL_ACTOR

    with pytest.raises(ValidationError, match="actor of eval traffic"):
        PrincipalConfig(id=EVAL_ACTOR, roles=("public",), key_sha256_env="EVAL_KEY_SHA256")
    assert PrincipalConfig(id="evaluator", roles=("public",), key_sha256_env="EVAL_KEY_SHA256").id == "evaluator"


def test_retrieval_legs_refuse_live_before_dense_and_a_leg_named_twice():
    from rag_engine.config import RetrievalConfig

    with pytest.raises(ValidationError, match="'live' must come after 'dense'"):
        RetrievalConfig(legs=("exact", "lexical", "live", "dense"))
    with pytest.raises(ValidationError, match="names a leg twice"):
        RetrievalConfig(legs=("exact", "lexical", "dense", "dense"))
    assert RetrievalConfig(legs=("exact", "lexical", "dense")).legs == ("exact", "lexical", "dense")
