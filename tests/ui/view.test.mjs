// The live view in a real browser: Debian's Chromium, headless,
// driven by playwright-core, against the operator on kubesim. scripts/ui-e2e.sh
// starts both and runs this with:
//   VIEW_URL   the operator's live view (http://127.0.0.1:PORT/)
//   SIM_URL    kubesim's API (plain HTTP, no token), for changes and timings
//   OUT        where screenshots and figures go
// The page must list the model, show a version change as RollingOut then
// Ready without a reload, show an unloadable version's failure and rollback,
// and drop a deleted model. Update latency: from the moment the API first
// returns the new phase (polled every 10 ms) to the moment the page shows it
// (a MutationObserver in the page notes the time); both on this machine's
// clock.
import { chromium } from "playwright-core";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const { VIEW_URL, SIM_URL, OUT } = process.env;
const NS = "openmed";
const NAME = "openmed-service";
const MODEL = `${SIM_URL}/apis/openmed.ai/v1alpha1/namespaces/${NS}/openmedmodels/${NAME}`;
const V2 = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2";
const BAD = "OpenMed/OpenMed-PII-unloadable-v3";

/** A request to the model on kubesim; a refusal fails the test with the
 * server's words, not later as a timeout. */
async function api(method, body, type = "application/merge-patch+json") {
  const r = await fetch(MODEL, { method, headers: { "content-type": type }, body: body && JSON.stringify(body) });
  if (!r.ok) throw new Error(`${method} ${MODEL}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** Poll the API (started before the change) until the model's phase is
 * `phase`; when a poll first saw it. */
async function apiPhase(phase, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const m = await api("GET");
    if (m?.status?.phase === phase) return Date.now();
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`the API never said ${phase}`);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic"],
});
const figures = {};
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(VIEW_URL);
  const row = page.locator(`tr[data-key="${NS}/${NAME}"]`);
  await row.waitFor({ timeout: 30000 });
  await page.waitForSelector(`tr[data-key="${NS}/${NAME}"][data-phase="Ready"]`, { timeout: 60000 });
  assert.match(await page.locator("#state").textContent(), /Live/);
  assert.match(await row.textContent(), /Ready: True \(RolloutSucceeded\)/);
  // Ages read as people say them: "12s ago", never "for 103s".
  assert.match(await row.locator("td[data-label=Phase] .age").textContent(), /^\d+[smhd] ago$/);
  await page.screenshot({ path: `${OUT}/1-ready.png`, fullPage: true });

  // Every phase the page shows, with the time it first showed it.
  await page.evaluate((key) => {
    window.seen = {};
    new MutationObserver(() => {
      const tr = document.querySelector(`tr[data-key="${key}"]`);
      const p = tr ? tr.dataset.phase : "gone";
      if (!(p in window.seen)) window.seen[p] = Date.now();
    }).observe(document.getElementById("namespaces"), { childList: true, subtree: true, attributes: true });
  }, `${NS}/${NAME}`);
  const shown = async (phase) => {
    await page.waitForFunction((p) => window.seen && p in window.seen, phase, { timeout: 60000 });
    return page.evaluate((p) => window.seen[p], phase);
  };

  // A version change: RollingOut, then Ready, with no reload.
  const navigations = requests.filter((u) => u === VIEW_URL).length;
  const rollingSeen = apiPhase("RollingOut");
  await api("PATCH", { spec: { version: V2 } });
  const rollingApi = await rollingSeen;
  const rollingPage = await shown("RollingOut");
  await page.screenshot({ path: `${OUT}/2-rolling-out.png`, fullPage: true });
  await page.evaluate(() => { delete window.seen.Ready; });
  const readyApi = await apiPhase("Ready");
  const readyPage = await shown("Ready");
  assert.match(await row.textContent(), new RegExp(`active: ${V2}`));
  assert.equal(requests.filter((u) => u === VIEW_URL).length, navigations, "the page was reloaded");
  figures.rollingOutMs = rollingPage - rollingApi;
  figures.readyMs = readyPage - readyApi;

  // An unloadable version: the failure, then the automatic rollback.
  const rolledBackSeen = apiPhase("RolledBack", 90000);
  await api("PATCH", { spec: { version: BAD, rolloutStrategy: { progressDeadlineSeconds: 5 } } });
  const rolledBackApi = await rolledBackSeen;
  figures.rolledBackMs = (await shown("RolledBack")) - rolledBackApi;
  // The Events follow the status write that announced them.
  await page.waitForFunction((key) => /RolloutFailed[^]*RollbackSucceeded|RollbackSucceeded[^]*RolloutFailed/.test(document.querySelector(`tr[data-key="${key}"]`).textContent), `${NS}/${NAME}`);
  const text = await row.textContent();
  assert.match(text, /RolledBack/);
  assert.match(await row.locator('td[data-label="Rollbacks"]').textContent(), /^1/);
  // Expanded, the model's recent Events are all there, each rollout's own.
  await row.locator("details summary").click();
  const reasons = await row.locator("ul.events li strong").allTextContents();
  assert.ok(reasons.filter((r) => r === "RolloutStarted").length >= 2, `every rollout's Event: ${reasons}`);
  for (const r of ["RolloutSucceeded", "RolloutFailed", "RollbackStarted", "RollbackSucceeded"]) assert.ok(reasons.includes(r), `${r} in ${reasons}`);
  await page.screenshot({ path: `${OUT}/3-rolled-back.png`, fullPage: true });

  // Deleted: the row goes.
  await api("DELETE");
  await row.waitFor({ state: "detached", timeout: 60000 });
  await page.screenshot({ path: `${OUT}/4-deleted.png`, fullPage: true });

  // Nothing but the view's own origin was asked for.
  const origin = new URL(VIEW_URL).origin;
  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith("data:"));
  assert.deepEqual(foreign, []);

  // The same page on a phone.
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true });
  await phone.goto(VIEW_URL);
  await phone.waitForSelector("#state[data-live=true]");
  await phone.screenshot({ path: `${OUT}/5-phone-empty.png` });
  figures.pageBytes = (await (await fetch(VIEW_URL)).text()).length;
  writeFileSync(`${OUT}/figures.json`, JSON.stringify(figures, null, 1));
  console.log("ui-e2e:", JSON.stringify(figures));
} finally {
  await browser.close();
}
