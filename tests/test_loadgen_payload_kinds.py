"""Payload kinds beyond random text: templates with random fields, empirical
size distributions from a file, replayed JSON-lines bodies; located errors."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter

import numpy as np
import pytest

from tailscope.loadgen.datafiles import DataFileError, load_bodies, load_sizes
from tailscope.loadgen.payloads import PayloadMaker
from tailscope.loadgen.spec import PayloadSpec, SizeSpec, SpecError
from tailscope.loadgen.templates import TemplateError, parse_template
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario

TEMPLATE = ('{"user": {{int:1:6}}, "temp": {{float:0.5:1.5}}, "mode": "{{choice:fast|slow|exact}}", '
            '"q": "{{text:12}}", "ctx": "{{text:3:8}}", "id": "{{uuid}}", "doc": "{{text}}"}')


def maker(spec: PayloadSpec, seed: int = 1) -> PayloadMaker:
    return PayloadMaker(spec, np.random.default_rng(seed))


def test_template_fields_have_their_ranges_and_distributions():
    make = maker(PayloadSpec("template", body=TEMPLATE, size=SizeSpec("uniform", min=20, max=30))).make
    bodies = [json.loads(make()) for _ in range(3000)]
    users = Counter(b["user"] for b in bodies)
    assert set(users) == {1, 2, 3, 4, 5, 6} and min(users.values()) > 400  # uniform over 1..6
    assert all(0.5 <= b["temp"] <= 1.5 for b in bodies)  # 4 decimals: 1.49996 prints as 1.5
    assert Counter(b["mode"] for b in bodies).keys() == {"fast", "slow", "exact"}
    assert all(len(b["q"]) == 12 and re.fullmatch(r"[a-z ]+", b["q"]) for b in bodies)
    assert {len(b["ctx"]) for b in bodies} == set(range(3, 9))
    assert {len(b["doc"]) for b in bodies} == set(range(20, 31))  # {{text}} takes the size distribution
    ids = [uuid.UUID(b["id"]) for b in bodies]
    assert all(u.version == 4 for u in ids) and len(set(ids)) == len(ids)
    assert len({b["q"] for b in bodies}) > 2900  # fresh values per request


def test_template_bodies_are_seeded_and_json_templates_are_sent_as_json():
    spec = PayloadSpec("template", body=TEMPLATE)
    a, b = maker(spec, 4), maker(spec, 4)
    assert [a.make() for _ in range(5)] == [b.make() for _ in range(5)]
    assert a.content_type == "application/json"
    assert maker(PayloadSpec("template", body="q={{int:1:2}}")).content_type.startswith("text/plain")


@pytest.mark.parametrize("template, message", [
    ("{{int:5}}", "two int bounds"),
    ("{{int:9:1}}", "below LO"),
    ("{{colour}}", "unknown field 'colour'"),
    ("{{choice:}}", "at least one option"),
    ("x {{text:1:2", "unclosed field"),
    ("", "non-empty body"),
])
def test_bad_templates_are_rejected_with_the_field(template, message):
    with pytest.raises(TemplateError, match=re.escape(message)):
        parse_template(template)
    with pytest.raises(SpecError) as exc:
        PayloadSpec("template", body=template)
    assert exc.value.field == "body"


def test_empirical_sizes_are_drawn_from_the_file_with_its_frequencies(tmp_path):
    path = tmp_path / "sizes.txt"
    path.write_text("# bytes\n100\n100\n100\n5000\n")
    values = load_sizes(path)
    make = maker(PayloadSpec("random_bytes", size=SizeSpec("empirical", values=values, file=str(path)))).make
    sizes = Counter(len(make()) for _ in range(4000))
    assert set(sizes) == {100, 5000}
    assert sizes[100] / 4000 == pytest.approx(0.75, abs=0.03)


def test_replayed_bodies_in_order_or_at_random(tmp_path):
    path = tmp_path / "bodies.jsonl"
    path.write_text('{"prompt": "a"}\n\n[1, 2]\n"text"\n')
    bodies = load_bodies(path)
    assert bodies == (b'{"prompt": "a"}', b"[1, 2]", b'"text"')
    sequential = maker(PayloadSpec("replay", bodies=bodies, file=str(path)))
    assert [sequential.make() for _ in range(4)] == [*bodies, bodies[0]]
    assert sequential.content_type == "application/json"
    shuffled = maker(PayloadSpec("replay", bodies=bodies, order="random"))
    assert Counter(shuffled.make() for _ in range(3000)).keys() == set(bodies)


@pytest.mark.parametrize("loader, text, line, message", [
    (load_sizes, "10\n-1\n", 2, "must be >= 0"),
    (load_sizes, "10\nbig\n", 2, "an integer"),
    (load_bodies, '{"a": 1}\n{"a": \n', 2, "not a JSON document"),
    (load_bodies, "\n\n", 0, "no bodies"),
])
def test_bad_data_files_name_the_line(tmp_path, loader, text, line, message):
    path = tmp_path / "data.txt"
    path.write_text(text)
    with pytest.raises(DataFileError) as exc:
        loader(path)
    assert exc.value.line == line and message in exc.value.message


def test_scenario_payload_files_resolve_next_to_the_scenario_and_report_bad_lines(tmp_path):
    (tmp_path / "sizes.txt").write_text("64\n128\n")
    (tmp_path / "bodies.jsonl").write_text('{"a": 1}\nnot json\n')
    text = """\
target: http://127.0.0.1:9
duration: 5s
in_flight_policy: drop
max_in_flight: 4
arrival: {rate: 5}
classes:
  - name: sized
    path: /a
    payload: {kind: random_text, size: {dist: empirical, file: sizes.txt}}
  - name: replayed
    path: /b
    payload: {kind: replay, file: bodies.jsonl, order: random}
"""
    path = tmp_path / "s.yaml"
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, str(path))
    assert str(exc.value).startswith(f"{path}:12: classes[1].payload.file: {tmp_path / 'bodies.jsonl'}:2: "
                                     "not a JSON document")
    (tmp_path / "bodies.jsonl").write_text('{"a": 1}\n')
    scenario = parse_scenario(text, str(path))
    assert scenario.classes[0].payload.size.values.tolist() == [64, 128]
    assert scenario.classes[1].payload.bodies == (b'{"a": 1}',)
    plan = scenario.load_plan()
    assert plan.in_flight_policy == "drop" and plan.max_in_flight == 4
    with pytest.raises(ScenarioError, match=r":3: in_flight_policy: expected wait or drop"):
        parse_scenario(text.replace("in_flight_policy: drop", "in_flight_policy: shed"), str(path))
