package acpx

import "github.com/pcrunner/pcrunner/internal/provider"

// classifyRPCError classifies an error answer to method (acp.md §6).
func classifyRPCError(method string, e *provider.RPCError) *provider.Failure {
	if e.Code == provider.CodeAuthRequired {
		return provider.NewFailure(provider.ClassAuthenticationRequired, e)
	}
	switch method {
	case provider.MethodInitialize, provider.MethodSessionNew:
		return provider.NewFailure(provider.ClassACPSessionInitFailed, e)
	case provider.MethodSessionLoad, provider.MethodSessionResume:
		return provider.NewFailure(provider.ClassSessionResumeRequired, e)
	case provider.MethodSessionPrompt:
		return provider.NewFailure(provider.ClassTurnFailed, e)
	}
	return provider.NewFailure(provider.ClassUnclassified, e)
}
