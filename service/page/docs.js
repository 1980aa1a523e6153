// GET /docs (service/routes/docs.py): Swagger UI over this server's OpenAPI schema. A file of its own, since the
// docs' Content-Security-Policy allows no inline script; every URL is relative, so a path prefix keeps working.
window.ui = SwaggerUIBundle({
  url: new URL("openapi.json", document.baseURI).href,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null, // the default sends the schema to swagger.io's validator
  presets: [SwaggerUIBundle.presets.apis],
});
