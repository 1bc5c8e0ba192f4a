// Package ui is control-api's web dashboard at /ui: server-rendered HTML
// with a little plain JavaScript (live refresh of the banner and the drain
// panel, select-all), no front-end build.
//
// It reads and acts only through control-api's service layer (the same
// api.ControlService, api.DispatchControl and api.Schedules the gRPC and
// JSON transports call), never the database, so every validation, audit
// record and metric is the API's. It sits behind the same authentication
// middleware as the JSON API: AccessPolicy admits producers to every page
// and operators alone to every form, and the pages hide the forms from
// anyone who may not post them (docs/dashboard.md, ADR-0009).
package ui
