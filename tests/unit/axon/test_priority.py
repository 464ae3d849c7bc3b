from axon.priority import CLASSES, capped, engine_priority, rank
from cortex.routing.tenant_policy import DEFAULT_POLICY, FixedTenantPolicies, TenantPolicy


def test_classes_run_highest_first_and_the_engine_agrees() -> None:
    assert CLASSES == ("interactive", "default", "batch")
    assert [rank(c) for c in CLASSES] == [0, 1, 2]
    assert [engine_priority(c) for c in CLASSES] == [0, 1, 2]


def test_a_ceiling_lowers_a_class_above_it_and_keeps_one_below() -> None:
    assert capped("interactive", "default") == "default"
    assert capped("batch", "default") == "batch"
    assert capped("interactive", "interactive") == "interactive"


def test_a_tenant_without_a_row_gets_the_default_policy() -> None:
    policies = FixedTenantPolicies({"a": TenantPolicy(weight=3.0)})
    assert policies.policy("a").weight == 3.0
    assert policies.policy("b") == DEFAULT_POLICY
    assert DEFAULT_POLICY.weight == 1.0 and DEFAULT_POLICY.max_priority == "default"
