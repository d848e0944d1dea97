// Package catalog is the run's Paperclip tool catalog (tools.md §1): the
// parsed and compiled `run.prepare.authorizedTools`, what the bridge lists
// and accepts (tools/list, tools/call name resolution, argument and result
// validation), the server redactor's refusal rules (§3 item 2) and the
// reserved paperclip_finish / paperclip_block result tools (§4).
//
// Errors are plain errors whose text is safe to put in a command result or a
// tool error: they name the problem and the operation id (ids are not
// secret), never a description, a schema or an input value.
package catalog
