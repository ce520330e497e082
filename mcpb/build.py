"""Builds one Claude Desktop extension (MCP Bundle, .mcpb) per platform wheel.

Usage: python mcpb/build.py DIST OUT MCPB

DIST holds the wheels (maturin `bin` bindings: each has one executable in its
`.data/scripts/`), OUT receives `ipython-mcp-<version>-<platform tag>.mcpb`, and MCPB is
the `mcpb` command (e.g. "npx --yes @anthropic-ai/mcpb@2.1.2"). The bundle is this
directory's manifest.json with the wheel's executable as `server/ipython-mcp-server`, and
the manifest's platforms narrowed to the wheel's. tests/install.rs runs this script on the
wheel it builds, so the release and the test assemble bundles the same way.
"""

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent


def platform_of(wheel_name):
    tag = wheel_name[: -len(".whl")].split("-")[-1]
    if tag.startswith("macosx"):
        return "darwin", tag
    if "linux" in tag:
        return "linux", tag
    raise SystemExit(f"no bundle platform for wheel {wheel_name}")


def build(wheel, out, mcpb):
    platform, tag = platform_of(wheel.name)
    manifest = json.loads((HERE / "manifest.json").read_text())
    manifest["compatibility"]["platforms"] = [platform]
    with tempfile.TemporaryDirectory() as work:
        bundle = pathlib.Path(work) / "bundle"
        (bundle / "server").mkdir(parents=True)
        (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        server = bundle / "server" / "ipython-mcp-server"
        with zipfile.ZipFile(wheel) as archive:
            [script] = [n for n in archive.namelist() if ".data/scripts/" in n]
            with archive.open(script) as source, open(server, "wb") as target:
                shutil.copyfileobj(source, target)
        os.chmod(server, 0o755)
        subprocess.run([*mcpb, "validate", str(bundle / "manifest.json")], check=True)
        target = out / f"ipython-mcp-{manifest['version']}-{tag}.mcpb"
        subprocess.run([*mcpb, "pack", str(bundle), str(target)], check=True)
        return target


def main():
    dist, out, mcpb = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), shlex.split(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dist.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheels in {dist}")
    for wheel in wheels:
        print("bundle:", build(wheel, out, mcpb), flush=True)


if __name__ == "__main__":
    main()
