"""The undo journal and its replay on plain files (no root needed): order, torn lines, idempotence."""

from __future__ import annotations

import json

from tailscope.faults.leftovers import main as leftovers_main
from tailscope.faults.leftovers import undo_leftovers
from tailscope.faults.undo_journal import JOURNAL_NAME, UndoJournal, read_undo_journal


def test_entries_are_replayed_newest_first_and_the_journal_goes(tmp_path):
    journal = UndoJournal(str(tmp_path / JOURNAL_NAME))
    setting = tmp_path / "setting"
    setting.write_text("changed-twice")
    swap = tmp_path / "tailscope-swap-x"  # never swapped on: replay only deletes it
    swap.write_bytes(b"\0" * 4096)
    journal.remove_swap_file(str(swap))
    journal.restore_file(str(setting), "original")
    journal.restore_file(str(setting), "intermediate")  # the newest entry is undone first, the oldest last
    journal.remove_cgroup(str(tmp_path / "no-such-cgroup"), str(tmp_path), 1, "cpu")
    done, errors = undo_leftovers(journal.path)
    assert errors == []
    assert setting.read_text() == "original"
    assert not swap.exists() and not (tmp_path / JOURNAL_NAME).exists()
    assert done[0].startswith("removed cgroup") and done[-1] == f"removed swap file {swap}"
    assert undo_leftovers(journal.path) == ([], [])  # nothing left: a second replay does nothing


def test_a_torn_last_line_and_unknown_kinds_are_skipped(tmp_path):
    path = tmp_path / JOURNAL_NAME
    good = {"undo": "restore_file", "path": str(tmp_path / "f"), "value": "1"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({"undo": "reboot", "path": "/"}) + "\n" + '{"undo": "remo')
    assert read_undo_journal(str(path)) == [good]


def test_what_cannot_be_put_back_is_listed_and_the_journal_kept(tmp_path, capsys):
    journal = UndoJournal(str(tmp_path / JOURNAL_NAME))
    journal.restore_file(str(tmp_path / "a-directory"), "1")
    (tmp_path / "a-directory").mkdir()
    assert leftovers_main([str(tmp_path)]) == 1
    assert "error: restore_file" in capsys.readouterr().err
    assert (tmp_path / JOURNAL_NAME).exists()


def test_a_journal_without_a_path_keeps_nothing(tmp_path):
    journal = UndoJournal(None)
    journal.remove_swap_file(str(tmp_path / "x"))
    journal.discard()
    assert list(tmp_path.iterdir()) == []


def test_the_report_command_points_at_a_journal_left_in_the_run_directory(tmp_path):
    import io

    from rich.console import Console

    from tailscope.cli.commands.common import warn_of_fault_leftovers

    out = io.StringIO()
    warn_of_fault_leftovers(str(tmp_path), Console(file=out, width=300))
    assert out.getvalue() == ""
    UndoJournal(str(tmp_path / JOURNAL_NAME)).remove_cgroup("/sys/fs/cgroup/cpu/x", "/sys/fs/cgroup/cpu", 1, "cpu")
    warn_of_fault_leftovers(str(tmp_path), Console(file=out, width=300))
    assert f"python -m tailscope.faults.leftovers {tmp_path}" in out.getvalue()
