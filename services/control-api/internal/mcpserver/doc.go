// Package mcpserver is control-api's Model Context Protocol server, served
// at /mcp over the streamable HTTP transport (stateless: any replica
// answers any request), behind the same authentication as every other
// route. Agents operate pulse through it — dispatch status, pause and
// resume, drain progress, jobs, topics, dead letters — and agent workers
// run jobs through its queue tools (queue.claim, queue.heartbeat,
// queue.complete, queue.fail), each answer carrying the pause state as
// its system envelope.
//
// Every tool calls what the HTTP API calls (api.ControlService,
// api.DispatchControl, api.TopicService) or, for the queue tools, the
// jobstore statements dispatch-gateway runs: the same SQL, the same
// fences, the same schema rules. Who may call which tool is ToolRoles,
// the HTTP policy's roles for the same action (ADR-0040).
package mcpserver
