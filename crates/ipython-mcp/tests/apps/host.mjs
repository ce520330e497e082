// A minimal MCP Apps host, for tests/apps.rs: connects to the server over stdio with the
// official TypeScript SDK client (declaring the MCP Apps extension), runs one `execute`,
// loads the tool's `ui://` view into a sandboxed frame of a page in Chromium under the
// Content-Security-Policy the view's resource declares, and plays the host's side of the
// postMessage protocol: answers `ui/initialize`, sends the tool input and result after
// `ui/notifications/initialized`, forwards `resources/read` and `tools/call` to the server, and
// sizes the frame from `ui/notifications/size-changed`. Waits on the DOM, never on time.
// Chart libraries' CDN requests are answered here (a stub Plotly) or refused (Vega).
//
// Usage: node host.mjs <server binary> <screenshot.png> <chromium> <python cell>
// Prints one JSON report on stdout; everything else goes to stderr.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { createRequire } from "node:module";
import { ReadResourceRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import Ajv2020 from "ajv/dist/2020.js";
import { chromium } from "playwright-core";

const [binary, screenshotPath, chromiumPath, code] = process.argv.slice(2);
const EXTENSION = "io.modelcontextprotocol/ui";
const VIEW_MIME = "text/html;profile=mcp-app";
// Bounds, not pauses: a kernel start on a loaded machine, a page on a slow one.
const CALL_TIMEOUT_MS = 600_000;
const DOM_TIMEOUT_MS = 120_000;

// The MCP Apps reference package's JSON schemas: what the view sends, what the server links
// and what the host passes on are checked against them.
const appsSchema = createRequire(import.meta.url)("@modelcontextprotocol/ext-apps/schema.json");
const ajv = new Ajv2020({ strict: false, validateFormats: false });
const validators = new Map();
const protocol = { checked: [], violations: [] };
function check(kind, value) {
  if (!validators.has(kind)) validators.set(kind, ajv.compile(appsSchema.$defs[kind]));
  const validate = validators.get(kind);
  protocol.checked.push(kind);
  if (!validate(value)) protocol.violations.push(`${kind}: ${ajv.errorsText(validate.errors)}`);
}
const APP_MESSAGES = {
  "ui/initialize": "McpUiInitializeRequest",
  "ui/notifications/initialized": "McpUiInitializedNotification",
  "ui/notifications/size-changed": "McpUiSizeChangedNotification",
};
function checkAppMessage({ method, params }) {
  if (APP_MESSAGES[method]) {
    check(APP_MESSAGES[method], params === undefined ? { method } : { method, params });
  } else if (method === "resources/read") {
    protocol.checked.push(method);
    const parsed = ReadResourceRequestSchema.safeParse({ method, params });
    if (!parsed.success) protocol.violations.push(`${method}: ${parsed.error.message}`);
  } else {
    protocol.violations.push(`the view sent ${method}, which this test does not expect`);
  }
}

const client = new Client(
  { name: "ipython-mcp-apps-test-host", version: "1" },
  { capabilities: { extensions: { [EXTENSION]: { mimeTypes: [VIEW_MIME] } } } },
);
await client.connect(
  new StdioClientTransport({ command: binary, args: [], env: process.env, stderr: "inherit" }),
);

const report = {};
try {
  const { tools } = await client.listTools();
  report.tools_with_view = Object.fromEntries(
    tools.filter((tool) => tool._meta?.ui?.resourceUri).map((tool) => [tool.name, tool._meta.ui.resourceUri]),
  );
  for (const tool of tools) if (tool._meta?.ui) check("McpUiToolMeta", tool._meta.ui);
  const viewUri = report.tools_with_view.execute;
  const { resources } = await client.listResources();
  report.listed_view = resources.find((resource) => resource.uri === viewUri) ?? null;
  const { resourceTemplates } = await client.listResourceTemplates();
  report.templates = resourceTemplates.map((template) => template.uriTemplate);

  const view = (await client.readResource({ uri: viewUri })).contents[0];
  report.view = { mimeType: view.mimeType, meta: view._meta ?? null, bytes: view.text.length };
  check("McpUiResourceMeta", view._meta?.ui);

  const args = { code };
  const result = await client.callTool({ name: "execute", arguments: args }, undefined, {
    timeout: CALL_TIMEOUT_MS,
  });
  report.result_meta = result._meta ?? null;
  report.model_images = result.content
    .filter((block) => block.type === "image")
    .map((block) => pngSize(Buffer.from(block.data, "base64")));

  try {
    await client.readResource({ uri: "ipython-mcp://executions/no-such-execution" });
    report.unknown_execution = { error: null };
  } catch (error) {
    report.unknown_execution = { code: error.code, message: error.message };
  }

  check("McpUiToolResultNotification", { method: "ui/notifications/tool-result", params: result });
  report.page = await showInChromium(view, args, result);
  for (const message of report.page.app_messages) checkAppMessage(message);
  report.protocol = protocol;
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");

// Width and height from a PNG's IHDR.
function pngSize(bytes) {
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

// The policy a host builds from the resource's `_meta.ui.csp`: nothing beyond what it declares.
function contentSecurityPolicy(csp = {}) {
  const resources = (csp.resourceDomains ?? []).join(" ");
  const connect = (csp.connectDomains ?? []).join(" ") || "'none'";
  const frames = (csp.frameDomains ?? []).join(" ") || "'none'";
  return [
    "default-src 'none'",
    `script-src 'self' 'unsafe-inline' ${resources}`,
    `style-src 'self' 'unsafe-inline' ${resources}`,
    `img-src 'self' data: ${resources}`,
    `font-src 'self' ${resources}`,
    `media-src 'self' data: ${resources}`,
    `connect-src ${connect}`,
    `frame-src ${frames}`,
    "object-src 'none'",
    "base-uri 'self'",
  ].join("; ");
}

async function showInChromium(view, args, result) {
  const html = view.text.replace(
    /<head>/i,
    `<head><meta http-equiv="Content-Security-Policy" content="${contentSecurityPolicy(view._meta?.ui?.csp)}">`,
  );
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    chromiumSandbox: false,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 1200 } });
    page.on("console", (message) => console.error(`[page ${message.type()}] ${message.text()}`));
    page.on("pageerror", (error) => console.error(`[page error] ${error.message}`));
    // No network here, and none needed: Plotly's library is a stub that records what the view
    // asks it to draw (the view's interactive path), Vega's is unreachable (its fallback path).
    await page.route("https://cdn.plot.ly/**", (route) =>
      route.fulfill({
        contentType: "application/javascript",
        body: `window.Plotly = { newPlot(element, data, layout) {
          element.dataset.stub = JSON.stringify({ url: document.currentScript ? document.currentScript.src : null,
            traces: data.length, x: data[0].x, title: layout.title && layout.title.text });
          element.textContent = "stub plot";
          return Promise.resolve(element);
        } };`,
      }),
    );
    await page.route("https://cdn.jsdelivr.net/**", (route) => route.abort());
    await page.exposeFunction("forwardToServer", async (method, params) => {
      if (method === "resources/read") return await client.readResource(params);
      if (method === "tools/call") return await client.callTool(params, undefined, { timeout: CALL_TIMEOUT_MS });
      throw new Error(`not forwarded: ${method}`);
    });
    await page.setContent(`<!doctype html><html><body style="margin:0;background:#fff">
<iframe id="app" sandbox="allow-scripts" style="display:block;width:100%;height:100px;border:1px solid #bbb"></iframe>
<script>
  window.received = [];
  window.lastHeight = null;
  const app = document.getElementById("app");
  const call = ${JSON.stringify({ args, result }).replace(/</g, "\\u003c")};
  const reply = (id, outcome) => app.contentWindow.postMessage(Object.assign({ jsonrpc: "2.0", id }, outcome), "*");
  const tell = (method, params) => app.contentWindow.postMessage({ jsonrpc: "2.0", method, params }, "*");
  window.addEventListener("message", async (event) => {
    if (event.source !== app.contentWindow) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0" || !message.method) return;
    window.received.push({ method: message.method, params: message.params });
    if (message.method === "ui/initialize") {
      reply(message.id, { result: {
        protocolVersion: message.params.protocolVersion,
        hostInfo: { name: "ipython-mcp-apps-test-host", version: "1" },
        hostCapabilities: { serverTools: {}, serverResources: {} },
        hostContext: { theme: "light", displayMode: "inline", platform: "desktop" },
      } });
    } else if (message.method === "ui/notifications/initialized") {
      tell("ui/notifications/tool-input", { arguments: call.args });
      tell("ui/notifications/tool-result", call.result);
    } else if (message.method === "ui/notifications/size-changed") {
      window.lastHeight = message.params.height;
      app.style.height = message.params.height + "px";
    } else if (message.id !== undefined) {
      try {
        reply(message.id, { result: await window.forwardToServer(message.method, message.params) });
      } catch (error) {
        reply(message.id, { error: { code: -32603, message: String(error.message || error) } });
      }
    }
  });
  app.srcdoc = ${JSON.stringify(html).replace(/</g, "\\u003c")};
</script></body></html>`);

    const app = page.frameLocator("#app");
    await app.locator('#outputs[data-state="rendered"]').waitFor({ timeout: DOM_TIMEOUT_MS });
    const appFrame = page.frames().find((frame) => frame.parentFrame() === page.mainFrame());
    // The table's frame has told the view its height, and the image has loaded.
    await appFrame.waitForFunction(
      () => {
        const frame = document.querySelector("iframe.html");
        const img = document.querySelector(".image img");
        const plotted = document.querySelector(".chart[data-stub]");
        const fallback = [...document.querySelectorAll("pre")].some((pre) => pre.textContent === "a Vega-Lite chart");
        return frame && frame.getBoundingClientRect().height > 24 && img && img.complete && img.naturalWidth > 0
          && plotted && fallback;
      },
      null,
      { timeout: DOM_TIMEOUT_MS },
    );
    const cells = await app.frameLocator("iframe.html").locator("td, th").allTextContents();
    const image = await app.locator(".image img").evaluate((img) => ({
      naturalWidth: img.naturalWidth,
      naturalHeight: img.naturalHeight,
      width: img.getBoundingClientRect().width,
      height: img.getBoundingClientRect().height,
    }));
    const streams = await app.locator("pre.stream").allTextContents();
    const plotly = JSON.parse(await app.locator(".chart[data-stub]").getAttribute("data-stub"));
    const vegaFallback = await app.locator("pre", { hasText: "a Vega-Lite chart" }).count();
    const status = await app.locator("#status").textContent();
    const contentHeight = await appFrame.evaluate(() =>
      Math.ceil(document.getElementById("root").getBoundingClientRect().height),
    );
    // The host has sized the frame to the view's last report.
    await page.waitForFunction((height) => window.lastHeight === height, contentHeight, {
      timeout: DOM_TIMEOUT_MS,
    });
    // Every frame (the table's runs in a process of its own) has painted its current layout.
    for (const frame of page.frames()) {
      await frame.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
    }
    // The viewport, tall enough for the whole frame: a full-page or element capture resizes it,
    // the view re-lays out, and the frames with an origin of their own may be captured blank.
    const shot = await page.screenshot({ path: screenshotPath });
    // What the picture shows where the table and the image are: dark pixels (text) in the
    // table's frame, colour all over the image.
    const boxes = {
      table: await app.locator("iframe.html").boundingBox(),
      image: await app.locator(".image img").boundingBox(),
    };
    const painted = await page.evaluate(
      async ({ png, boxes }) => {
        const picture = new Image();
        picture.src = "data:image/png;base64," + png;
        await picture.decode();
        const canvas = document.createElement("canvas");
        canvas.width = picture.naturalWidth;
        canvas.height = picture.naturalHeight;
        const context = canvas.getContext("2d");
        context.drawImage(picture, 0, 0);
        const measure = ({ x, y, width, height }) => {
          const pixels = context.getImageData(Math.ceil(x), Math.ceil(y), Math.floor(width), Math.floor(height)).data;
          let dark = 0, white = 0;
          for (let i = 0; i < pixels.length; i += 4) {
            const [r, g, b] = [pixels[i], pixels[i + 1], pixels[i + 2]];
            if (r + g + b < 3 * 128) dark += 1;
            if (r > 245 && g > 245 && b > 245) white += 1;
          }
          return { pixels: pixels.length / 4, dark, white };
        };
        return { table: measure(boxes.table), image: measure(boxes.image) };
      },
      { png: shot.toString("base64"), boxes },
    );
    const received = await page.evaluate(() => window.received);
    return {
      cells,
      image,
      streams,
      plotly,
      vega_fallback: vegaFallback,
      painted,
      status,
      content_height: contentHeight,
      frame_height: await page.evaluate(() => window.lastHeight),
      app_messages: received,
    };
  } finally {
    await browser.close();
  }
}
