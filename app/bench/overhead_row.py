"""One row of ``vidpipe bench --overhead`` in a process of its own, for ``--against``: run as
a script with this code's modules or another tree's first on ``PYTHONPATH``
(``app.bench.service.run_in_tree``), it prints the row as its last line of JSON. The other
tree must have the overhead bench (`61ee23b` and later); the clip and the null model are
this tree's files, given by absolute path, so both codes see the same."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main(args: list[str]) -> None:
    source, mode, streams, frames, batch_size, clip, null_folder = args
    from app.bench.overhead import engine_row
    from app.bench.overhead_parts import decode_once, null_model

    model = null_model(Path(null_folder))
    memory = {g: decode_once(Path(clip), model[1], g) for g in (False, True)} \
        if source == "memory" else {}
    with tempfile.TemporaryDirectory(prefix="vidpipe-overhead-") as out:
        row = engine_row(source, mode, int(streams), int(frames), Path(clip), model, memory,
                         int(batch_size), Path(out))
    print(json.dumps(row))


if __name__ == "__main__":
    main(sys.argv[1:])
