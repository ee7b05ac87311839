"""Harbor's exception types as our error classes, and whether a reward beside each counts."""

from __future__ import annotations

# Harbor's exception type -> (our error class, whether a reward beside it still counts): Harbor's
# error policy table (models/trial/error_policy.py), its `has_valid_reward` column.
EXCEPTIONS: dict[str, tuple[str, bool]] = {
    "AgentTimeoutError": ("timeout", True),
    "NonZeroAgentExitCodeError": ("pipe_closed", True),
    "ContextWindowExceededError": ("provider_rejected", True),
    "ContextLengthExceededError": ("provider_rejected", True),
    "OutputTokenExceededError": ("provider_rejected", True),
    "OutputLengthExceededError": ("provider_rejected", True),
    "AgentSafetyRefusalError": ("provider_rejected", True),
    "ContentPolicyViolationError": ("provider_rejected", True),
    "BadRequestError": ("provider_rejected", False),
    "UnprocessableEntityError": ("provider_rejected", False),
    "UnsupportedModelParametersError": ("provider_rejected", False),
    "UnsupportedParamsError": ("provider_rejected", False),
    "VerifierTimeoutError": ("verifier_timeout", False),
    "RewardFileNotFoundError": ("verifier_no_reward", False),
    "RewardFileEmptyError": ("verifier_no_reward", False),
    "VerifierOutputParseError": ("verifier_bad_reward", False),
    "AddTestsDirError": ("verifier_infra", False),
    "DownloadVerifierDirError": ("verifier_infra", False),
    "EnvironmentStartTimeoutError": ("sandbox_setup", False),
    "HealthcheckError": ("sandbox_setup", False),
    "SandboxBuildFailedError": ("image_build", False),
    "AgentSetupTimeoutError": ("install_failure", False),
    "SandboxLikelyOutOfMemoryError": ("infra_failure", False),
    "MemoryLimitExceededError": ("infra_failure", False),
    "RuntimeRequestError": ("infra_failure", False),
    "AgentAuthenticationError": ("provider_auth", False),
    "AuthenticationError": ("provider_auth", False),
    "PermissionDeniedError": ("provider_auth", False),
    "RateLimitError": ("provider_rate_limit", False),
    "ApiRateLimitError": ("provider_rate_limit", False),
    "ApiUsageLimitError": ("usage_limit", False),
    "ApiError": ("api_error", False),
    "APIError": ("api_error", False),
    "ApiInternalServerError": ("api_error", False),
    "InternalServerError": ("api_error", False),
    "ApiOverloadedError": ("api_error", False),
    "ServiceUnavailableError": ("api_error", False),
    "ApiConnectionError": ("api_error", False),
    "APIConnectionError": ("api_error", False),
    "ApiConnectionClosedError": ("api_error", False),
    "ApiResponseStalledError": ("api_error", False),
    "UnknownApiError": ("api_error", False),
    "NetworkConnectionError": ("api_error", False),
    "BudgetExceededError": ("trial_budget", False),
    "CancelledError": ("interrupted", False),
}
VERIFIER_CLASSES = frozenset(c for c, _ in EXCEPTIONS.values() if c.startswith("verifier_"))
# our agent names where Harbor's differ (`-a claude` is Harbor's claude-code)
AGENT_NAMES = {"claude": "claude-code"}
