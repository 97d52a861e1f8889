"""Running a job on this machine, no cluster (`disttrain run --local`, a local sweep's
trials): its pods rendered as the operator would and made torchrun agents here (plan),
started and followed to the end (run), on ports nothing else takes (ports)."""
