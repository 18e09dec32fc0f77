"""What ``pip install .`` ships (the images install vidpipe that way, not editable): every
module of the three packages and the dashboard's files."""

import shutil
import subprocess
import sys
import zipfile

from tests.docker.shipped import REPO


def test_the_wheel_holds_every_module_and_the_dashboard(tmp_path):
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()
    source = tmp_path / "source"  # a copy: building in place would leave build/ behind
    for name in tracked:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "-w", str(tmp_path / "wheel"), str(source)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheel").glob("vidpipe-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {p for p in tracked if p.split("/")[0] in ("app", "pipelines", "models")
              and (p.endswith(".py") or p.startswith("app/service/dashboard/"))}
    assert wanted, "no tracked modules found"
    assert sorted(wanted - shipped) == []
