package protocol

import "fmt"

// Code is a protocol error code (PROTOCOL.md §6).
type Code string

// Error codes, as the protocol names them.
const (
	CodeParse                   Code = "parse_error"
	CodeLineTooLong             Code = "line_too_long"
	CodeUnknownOp               Code = "unknown_op"
	CodeInvalidField            Code = "invalid_field"
	CodeUnknownField            Code = "unknown_field"
	CodeClockRegression         Code = "clock_regression"
	CodeDuplicateWorker         Code = "duplicate_worker"
	CodeUnknownWorker           Code = "unknown_worker"
	CodeDuplicateRequest        Code = "duplicate_request"
	CodeUnknownRequest          Code = "unknown_request"
	CodeNoEligibleWorker        Code = "no_eligible_worker"
	CodeAllWorkersBusy          Code = "all_workers_busy"
	CodePinnedWorkerUnavailable Code = "pinned_worker_unavailable"
	CodePinnedWorkerOverloaded  Code = "pinned_worker_overloaded"
	CodeAffinityConflict        Code = "affinity_conflict"
	CodeQueueTimeout            Code = "queue_timeout"
	CodeUnknownPolicyClass      Code = "unknown_policy_class"
	CodeQueueRejected           Code = "queue_rejected"
	CodeQueueDeadlineExceeded   Code = "queue_deadline_exceeded"
	CodeConfigTooLate           Code = "config_too_late"
)

// Error is the error object of a response.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
