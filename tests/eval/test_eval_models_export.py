"""What ``job.export`` returns is a model to evaluate and to serve, as its folder is (no Ray; < 1 s)."""

from __future__ import annotations

import json
from pathlib import Path

from skyrl_core.exports import ExportResult
from skyrl_nb.eval_models import find_models


def test_an_export_result_is_found_as_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my-export"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    result = ExportResult(path=str(folder), step=4, checkpoint=str(tmp_path / "ckpt"), run_dir=None, base_model=None,
                          files=("config.json",), total_bytes=2)
    by_result, by_path = find_models({"a": result}), find_models({"a": str(folder)})
    assert by_result[0].model == by_path[0].model
    assert by_result[0].model.location == str(folder) and by_result[0].model.kind == by_path[0].model.kind
