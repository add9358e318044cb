import pytest

from settopk.configs import ConfigError, JobConfig, config_names, load_config


def test_shipped_configs_load():
    assert {"local", "sti2"} <= set(config_names())
    local, sti2 = load_config("local"), load_config("sti2")
    assert isinstance(local, JobConfig) and local.backend == "auto" and local.k == 100
    assert sti2.backend == "cupy" and sti2.synthetic.n_docs == 7_853_052 and sti2.synthetic.n_queries == 2000


def test_overrides_apply():
    assert load_config("local", {"k": 7}).k == 7


@pytest.mark.parametrize(
    "text, match",
    [
        ("bogus: 1\n", r"unknown key\(s\) \['bogus'\]"),
        ("synthetic: {nope: 2}\n", r"unknown key\(s\) \['nope'\]"),
        ("k: x\n", "k"),
        ("k: 0\n", r"k must be in \[1, 32767\]"),
        ("backend: tpu\n", "backend must be one of"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("k: [\n", "not valid YAML"),
        ("k: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ],
)
def test_bad_configs_are_rejected_with_the_file_named(tmp_path, text, match):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_config(str(path))
    assert str(path) in str(err.value)


def test_unknown_name():
    with pytest.raises(ConfigError, match="not a shipped config name"):
        load_config("no-such-config")
