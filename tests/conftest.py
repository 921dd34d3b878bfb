import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The suite runs what users run: compiled programs, from their first call on (by default a new
# program's first call runs on the interpreter; tests/test_first_call.py checks that), and
# every compiled call is checked against the numpy interpreter (TAPEJIT_VERIFY, compile.py):
# a program whose compiled result differs fails the test that ran it.
os.environ.setdefault("TAPEJIT_BACKEND", "numba")
os.environ.setdefault("TAPEJIT_FIRST_CALL", "compile")
os.environ.setdefault("TAPEJIT_VERIFY", "1")
# The LLVM lowering's kernels are compiled by numba once per machine: one library for the whole
# run (both xdist workers, their child processes), whatever cache directory a test uses
os.environ.setdefault("TAPEJIT_LIBRARY_DIR", os.path.join(
    __import__("tempfile").gettempdir(), f"tapejit-test-library-{os.getuid()}"))


@pytest.fixture
def jax_x64():
    """JAX with 64-bit types for this test only (a global `jax_enable_x64` would change what
    later tests in the same process get from JAX)."""
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


@pytest.fixture
def shared_cache(tmp_path_factory, monkeypatch):
    """One program cache for the whole run, for the modules that ask for it
    (`pytest.mark.usefixtures("shared_cache")`): their programs compile once for all their
    tests."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tjcache"))
    from tapejit import config
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


@pytest.fixture
def interpreter(monkeypatch):
    """Semantics only: run on the numpy interpreter (each compiled program costs a compile)."""
    monkeypatch.setenv("TAPEJIT_BACKEND", "interpret")
    from tapejit import config
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


@pytest.fixture(autouse=True)
def _no_shared_programs():
    """Each test starts without the programs of another test's transforms of the same
    function (tapejit/transforms/sharing.py): counts of traces and compiles stay each test's own."""
    from tapejit.transforms import sharing
    sharing.forget()


# ---- the fast tier ---------------------------------------------------------------------------
# `pytest -m "not slow" -n 2`: the inner loop, about a minute and a half on 2 cores; it still
# compiles something in every area (ops, autodiff, vmap, control flow, linalg, the passes, the
# numba and LLVM code, the cache, the tiers, the transforms, the tools). The whole suite stays
# the command that checks a change (README.md). What is slow and why, by file or by test
# function (all its parameters); a name that no longer exists stops the run.
SLOW_FILES = {
    "test_numba_backend.py": "every op-table row compiled on numba, first and second order",
    "test_cuda.py": "the CUDA simulator runs the zoo and the op table; PTX for every kernel",
    "test_bench_smoke.py": "every benchmark script, in a child process",
    "test_cache_security.py": "a fresh process and cache directory per attack on the cache",
    "test_cache_robust.py": "damaged cache entries read back in fresh processes",
    "test_examples.py": "every example script, in a child process",
    "test_dask.py": "a local Dask cluster of two worker processes",
    "test_ode_example.py": "the ODE example's fit and its checkpoint bench, in child processes",
}
SLOW_TESTS = {
    "JAX's import and x64 mode, to compare with": [
        "test_linalg.py::test_gradients_match_jax", "test_numpy_more.py::test_gradients_match_jax",
        "test_random.py::test_keys_bits_and_uniforms_are_jaxs",
        "test_sorting.py::test_gradients_match_jax", "test_special.py::test_gradients_match_jax",
        "test_vmap.py::test_against_jax"],
    "child processes (a cold import of tapejit and numba; programs loaded from disk)": [
        "test_bounds.py::test_cost_bench_runs",
        "test_bounds.py::test_a_failed_check_ends_a_while_loop",
        "test_cache.py::test_program_linking_a_cached_parallel_helper_loads_in_a_new_process",
        "test_cache.py::test_two_processes_fill_an_empty_cache",
        "test_cli.py::test_bench_peers_quick", "test_cli.py::test_cache_list_and_clear",
        "test_cli.py::test_demo_trains_to_the_accuracy_it_promises", "test_cli.py::test_info",
        "test_cli.py::test_usage_errors",
        "test_docs.py::test_doc_snippets_run_and_print_what_the_doc_shows",
        "test_first_call.py::test_llvm_a_warm_process_neither_lowers_nor_compiles",
        "test_first_call.py::test_llvm_a_warm_process_never_imports_numba",
        "test_first_call.py::test_log_info_reports_each_compile_and_disk_load",
        "test_llvm_jit.py::test_a_new_process_loads_kernels_and_object_code_without_numba",
        "test_llvm_jit.py::test_kernels_calling_numbas_helpers_load_without_its_compiler",
        "test_llvm_library_calls.py::test_kernels_load_in_a_new_process",
        "test_scipy_linalg.py::test_names_taken_after_either_import",
        "test_scipy_stats.py::test_wrapped_once_imported",
        "test_threads.py::test_the_threading_layer_in_a_new_process_is_numbas_or_the_users",
        "test_threads.py::test_a_warm_process_uses_the_budget_from_its_first_call_without_numba",
        "test_tiers.py::test_a_quick_tier_left_by_another_process_compiles_its_full_tier"],
    "a program per op-table row, function, dtype or layout, compiled (the fast tier keeps "
    "test_ops' forward rows and first derivatives)": [
        "test_bounds.py::test_gathers", "test_bounds.py::test_scatters",
        "test_bounds.py::test_gathers_in_loop_bodies",
        "test_bounds.py::test_the_primitives_check_their_own_reads",
        "test_bounds.py::test_one_hot_labels_in_a_gradient",
        "test_control_batching.py::test_mapper_runs_custom_vjp_and_njit_kernels_once_per_element",
        "test_control_batching.py::test_gradients_of_batched_loops_and_branches",
        "test_custom_vjp.py::test_njit_primitive_gradient_matches_finite_differences",
        "test_linalg.py::test_stacks_compiled_match_numpy", "test_linalg.py::test_stack_gradients",
        "test_llvm_kernels.py::test_a_loop_through_the_vector_variant_gives_the_scalar_entrys_bits",
        "test_llvm_kernels.py::test_every_variant_gives_the_scalar_entrys_bits",
        "test_llvm_kernels.py::test_many_call_sites_call_few_inline_with_the_same_bits",
        "test_llvm_library_calls.py::test_a_kernel_numba_cannot_build_leaves_the_program_to_numba",
        "test_llvm_library_calls.py::test_every_lapack_function_on_stacks",
        "test_llvm_library_calls.py::test_full_svd_and_gradients",
        "test_llvm_lower.py::test_same_bits_as_the_numba_generator",
        "test_numpy_more.py::test_gradients_compiled_match_interpreter_and_differences",
        "test_ops.py::test_float32", "test_ops.py::test_grad2_fd",
        "test_random.py::test_permutation",
        "test_scipy_linalg.py::test_compiled_gradients",
        "test_scipy_linalg.py::test_every_function_against_scipy_first_and_later_calls",
        "test_scipy_linalg.py::test_float32_stays_float32_and_integers_become_float64",
        "test_scipy_linalg.py::test_forward_mode_and_vmap",
        "test_scipy_stats.py::test_continuous_gradients_in_every_argument",
        "test_scipy_stats.py::test_continuous_methods_match_scipy",
        "test_scipy_stats.py::test_multivariate_normal_with_a_traced_cov",
        "test_sorting.py::test_compiled_match_numpy", "test_sorting.py::test_integers_compiled",
        "test_sorting.py::test_gradients_compiled_and_finite_differences",
        "test_special.py::test_rows_compiled_match_interpreter_first_and_later_calls",
        "test_special.py::test_compiled_special_functions_are_within_a_few_ulp_of_scipy",
        "test_transforms.py::test_batched_jacobian_of_every_primitive_matches_vjp_rows",
        "test_vmap.py::test_op_table_rows",
        "test_vmap.py::test_custom_vjp_and_njit_primitives_per_example",
        "test_vmath.py::test_ulp_error_and_special_values",
        "test_zoo.py::test_float32_stays_float32", "test_zoo.py::test_hessian_vector_product"],
    "long loops, checkpointed sweeps and derivatives of derivatives, compiled": [
        "test_control.py::test_checkpoint_policies_give_the_same_gradients",
        "test_control.py::test_checkpointed_scan_grad_matches_unrolled",
        "test_control.py::test_checkpointed_sweep_keeps_less_memory",
        "test_control.py::test_grad_of_grad_through_loops",
        "test_control.py::test_numba_compiles_once_for_any_number_of_steps",
        "test_control.py::test_numba_matches_the_interpreter",
        "test_control.py::test_scan_grad_matches_unrolled_and_fd",
        "test_control.py::test_while_loop_checkpoints",
        "test_draws.py::test_a_rerolled_loop_of_draws_matches_the_unrolled_one",
        "test_integrate.py::test_exponential_decay_of_a_pytree_is_exact_and_so_is_its_gradient",
        "test_integrate.py::test_grad_of_grad_differentiates_the_adjoint",
        "test_integrate.py::test_lotka_volterra_and_its_gradients_match_scipy",
        "test_llvm_lower.py::test_buffers_made_in_loops_are_freed",
        "test_llvm_lower.py::test_loop_carries_that_trade_buffers",
        "test_reroll.py::test_jacobian_hessian_and_jvp_reroll",
        "test_reroll.py::test_lotka_volterra_1000_steps_rerolls_to_one_scan",
        "test_reroll.py::test_nested_ys_and_xs_compiled",
        "test_reroll.py::test_second_order_through_a_rerolled_loop",
        "test_reroll.py::test_sequence_models_equal_unrolled_and_central_differences",
        "test_reroll.py::test_sequence_models_reroll_to_scans_of_fixed_size",
        "test_reroll.py::test_tracing_and_rerolling_is_linear_in_steps",
        "test_reroll.py::test_vjp_of_an_unrolled_loop_rerolls"],
    "many random programs, or large arrays": [
        "test_fuzz.py::test_compiled_agrees_with_numpy",
        "test_fuzz.py::test_guarded_programs_agree_with_numpy_on_every_branch",
        "test_fuzz.py::test_selfcheck_programs_with_parallel_nests",
        "test_reroll.py::test_random_step_bodies_unrolled_equal_fori_loop",
        "test_bounds.py::test_numba_bounds_check_sees_no_access_out_of_range",
        "test_bounds.py::test_selfcheck_calls_programs_with_an_index_out_of_range",
        "test_threads.py::test_a_product_cut_into_blocks_is_numpys"],
}
SLOW = {name for names in SLOW_TESTS.values() for name in names}


def _stale_slow_names() -> list[str]:
    here = os.path.dirname(__file__)
    stale = [f for f in SLOW_FILES if not os.path.exists(os.path.join(here, f))]
    for name in sorted(SLOW):
        path, function = os.path.join(here, name.split("::")[0]), name.split("::")[1]
        if not os.path.exists(path) or f"def {function}(" not in open(path).read():
            stale.append(name)
    return stale


def pytest_collection_modifyitems(config, items):
    """Mark `slow` what SLOW_FILES and SLOW_TESTS name."""
    stale = _stale_slow_names()
    if stale:
        raise pytest.UsageError(f"tests/conftest.py names slow tests that do not exist: {stale}")
    for item in items:
        name = getattr(item, "originalname", item.name)
        if item.path.name in SLOW_FILES or f"{item.path.name}::{name}" in SLOW:
            item.add_marker(pytest.mark.slow)
