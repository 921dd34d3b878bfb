"""The one time limit the tests put on a child process: a guard against a hang, far beyond the
slowest run of a busy machine (load 12 on 2 cores), so that no test depends on how fast the
machine is."""
HANG_S = 3600
