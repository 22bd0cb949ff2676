"""Target knobs: defaults, --help, YAML config file, precedence and validation."""

from __future__ import annotations

import argparse

import pytest

from tailscope.targets.reference.command import add_arguments, build_parser, config_from_args
from tailscope.targets.reference.config import ConfigError, TargetConfig, knob_fields


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_the_documented_ones() -> None:
    config = config_from_args(parse())
    assert config == TargetConfig()
    assert (config.host, config.max_batch_size, config.max_queue_delay_ms) == ("127.0.0.1", 8, 5.0)
    assert (config.max_queue_size, config.model_workers, config.tracing) == (256, 1, True)


def test_help_documents_every_knob_and_the_config_file() -> None:
    text = build_parser().format_help()
    for knob in knob_fields():
        assert "--" + knob.name.replace("_", "-") in text
    assert "--config" in text and "--no-tracing" in text


def test_flags_override_the_config_file_which_overrides_defaults(tmp_path) -> None:
    config_file = tmp_path / "target.yaml"
    config_file.write_text("max-batch-size: 16\npreferred_batch_sizes: [4, 8]\nmax_queue_delay_ms: 2.5\ntracing: false\n")
    config = config_from_args(parse("--config", str(config_file), "--max-batch-size", "12", "--model-workers", "2"))
    assert config.max_batch_size == 12
    assert config.preferred_batch_sizes == (4, 8)
    assert config.max_queue_delay_ms == 2.5
    assert config.model_workers == 2
    assert config.tracing is False


def test_command_line_lists_and_switches_parse() -> None:
    config = config_from_args(parse("--preferred-batch-sizes", "2", "4", "--no-tracing", "--access-log"))
    assert config.preferred_batch_sizes == (2, 4)
    assert (config.tracing, config.access_log) == (False, True)


@pytest.mark.parametrize(
    "yaml_text",
    ["unknown_knob: 1\n", "- a list\n", "max_batch_size: 0\n", "max_batch_size: 4\npreferred_batch_sizes: [8]\n"],
)
def test_bad_config_files_raise_config_error(tmp_path, yaml_text: str) -> None:
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(yaml_text)
    with pytest.raises(ConfigError):
        config_from_args(parse("--config", str(config_file)))


def test_a_missing_config_file_raises_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError):
        config_from_args(parse("--config", str(tmp_path / "absent.yaml")))
