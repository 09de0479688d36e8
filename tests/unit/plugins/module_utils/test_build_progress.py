"""module_utils/build_progress.py: one progress line from a build log's last lines,
in the formats the builds print (docker buildx plain progress, podman/buildah steps)."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import build_progress

BUILDX = ["#11 [internal] load build context", "#11 DONE 0.1s",
          "#12 [builder 3/7] RUN go build -o /out/scheduler ./cmd/scheduler", "#12 12.40 go: downloading k8s.io/api",
          ""]
BUILDAH = ["STEP 1/4: FROM registry.lab.internal/mirror/golang:1.26.3-bookworm",
           "STEP 2/4: COPY standin /standin", "--> 2b3f1c", "STEP 3/4: COPY app /opt/standin"]


@pytest.mark.parametrize("lines, expected", [
    (BUILDX, "build-01: KAI-Scheduler building for 12 min; step builder 3/7: RUN go build -o /out/scheduler "
             "./cmd/scheduler; last line: #12 12.40 go: downloading k8s.io/api"),
    (BUILDAH, "build-01: KAI-Scheduler building for 12 min; step 3/4: COPY app /opt/standin; last line: "
              "STEP 3/4: COPY app /opt/standin"),
    (["make: Entering directory '/var/tmp/smshare/KAI-Scheduler'"],
     "build-01: KAI-Scheduler building for 12 min; last line: make: Entering directory '/var/tmp/smshare/KAI-Scheduler'"),
    ([], "build-01: KAI-Scheduler building for 12 min; the log is empty so far"),
    (["", "   "], "build-01: KAI-Scheduler building for 12 min; the log is empty so far"),
])
def test_a_progress_line_names_the_step_and_the_last_line(lines, expected):
    assert build_progress.report("build-01", "KAI-Scheduler", 725.9, lines) == expected


def test_a_long_line_is_shortened_and_folded():
    line = build_progress.report("b", "f", 0, ["x\t" * 200])
    assert line.endswith("...") and "\t" not in line and len(line.split("last line: ")[1]) == build_progress.WIDTH
