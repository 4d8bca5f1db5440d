#!/usr/bin/env node
// Opens an `mmrt verify` HTML report in a headless browser and checks that it works offline:
// no console errors, no page errors, no failed requests and no request that is not file: or
// data:; the verdict banner and every section are present and non-empty; no scripts; nothing
// wider than the window. Takes a full-page screenshot.
//
// Usage: node tests/verify/report_browser.mjs REPORT.html SCREENSHOT.png
//            [--expect-verdict PASS|FAIL|INVALID]
// Exit status: 0 when every check passes, 1 on a problem (each printed), 2 on bad usage.
// The browser binary: $MMRT_CHROMIUM, else the system's chromium.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// Resolved against this file, so it works from any working directory.
import { chromium } from '../js/node_modules/playwright-core/index.mjs';

const SECTIONS = ['verdict', 'timeline', 'cdf', 'classes', 'attribution', 'streaks', 'drift',
  'preflight', 'baseline', 'fingerprint'];
const VERDICTS = ['PASS', 'FAIL', 'INVALID'];

function usage(message) {
  if (message) console.error(`report_browser: ${message}`);
  console.error('usage: node tests/verify/report_browser.mjs REPORT.html SCREENSHOT.png ' +
    '[--expect-verdict PASS|FAIL|INVALID]');
  process.exit(2);
}

function parseArgs(argv) {
  const positional = [];
  let expect = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--expect-verdict') {
      expect = argv[++i];
      if (!VERDICTS.includes(expect)) usage(`--expect-verdict takes one of ${VERDICTS.join(', ')}`);
    } else if (a.startsWith('--expect-verdict=')) {
      expect = a.slice('--expect-verdict='.length);
      if (!VERDICTS.includes(expect)) usage(`--expect-verdict takes one of ${VERDICTS.join(', ')}`);
    } else if (a === '-h' || a === '--help') {
      usage();
    } else if (a.startsWith('--')) {
      usage(`unknown option ${a}`);
    } else {
      positional.push(a);
    }
  }
  if (positional.length !== 2) usage('expected REPORT.html and SCREENSHOT.png');
  return { report: path.resolve(positional[0]), screenshot: path.resolve(positional[1]), expect };
}

// What the page holds, measured inside it.
function inspect(sections) {
  const text = (el) => (el ? el.textContent.replace(/\s+/g, ' ').trim() : '');
  const out = { sections: {}, scripts: document.scripts.length, svgs: [], overlaps: [] };
  const banner = document.getElementById('verdict-banner');
  out.banner = banner ? { text: text(banner), height: banner.getBoundingClientRect().height } : null;
  const order = [];
  for (const id of sections) {
    const el = document.getElementById(id);
    if (!el) continue;
    order.push(id);
    const r = el.getBoundingClientRect();
    out.sections[id] = { tag: el.tagName.toLowerCase(), heading: text(el.querySelector('h2')),
      text: text(el).length, height: r.height, width: r.width };
  }
  out.order = [...document.querySelectorAll('section[id]')].map((s) => s.id);
  document.querySelectorAll('svg').forEach((svg, i) => {
    const r = svg.getBoundingClientRect();
    const section = svg.closest('section');
    out.svgs.push({ i, section: section ? section.id : '', width: r.width, height: r.height });
    // Labels drawn over each other (a layout problem, reported but not fatal).
    const boxes = [...svg.querySelectorAll('text')].map((t) => ({ t: t.textContent,
      b: t.getBoundingClientRect() })).filter((x) => x.b.width > 0);
    for (let a = 0; a < boxes.length; a++) {
      for (let b = a + 1; b < boxes.length; b++) {
        const p = boxes[a].b, q = boxes[b].b;
        const ox = Math.min(p.right, q.right) - Math.max(p.left, q.left);
        const oy = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
        if (ox > 2 && oy > 2) {
          out.overlaps.push(`${section ? section.id : 'svg'}: "${boxes[a].t}" and "${boxes[b].t}"`);
        }
      }
    }
  });
  out.scrollWidth = document.documentElement.scrollWidth;
  out.clientWidth = document.documentElement.clientWidth;
  out.title = document.title;
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(args.report)) usage(`no such file: ${args.report}`);
  const executablePath = process.env.MMRT_CHROMIUM || '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) usage(`no browser at ${executablePath} (set MMRT_CHROMIUM)`);

  const problems = [];
  const browser = await chromium.launch({ executablePath, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'], timeout: 60000 });
  let facts;
  try {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 },
      deviceScaleFactor: 1, offline: true });
    // Nothing may leave the machine: record and abort anything that is not a local file.
    await context.route(/^(?!file:|data:)/i, (route) => route.abort());
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('requestfailed', (r) => {
      const why = r.failure() ? r.failure().errorText : 'failed';
      problems.push(`request failed: ${r.url()} (${why})`);
    });
    page.on('request', (r) => {
      const url = r.url();
      if (!url.startsWith('file:') && !url.startsWith('data:')) {
        problems.push(`request that is not file: or data: (the report must be offline): ${url}`);
      }
    });
    page.on('dialog', (d) => {
      problems.push(`dialog opened (a script ran): ${d.message()}`);
      d.dismiss().catch(() => {});
    });

    const response = await page.goto(pathToFileURL(args.report).href,
      { waitUntil: 'load', timeout: 30000 });
    if (response && !response.ok()) problems.push(`loading the report: status ${response.status()}`);
    facts = await page.evaluate(inspect, SECTIONS);
    fs.mkdirSync(path.dirname(args.screenshot), { recursive: true });
    await page.screenshot({ path: args.screenshot, fullPage: true });
  } finally {
    await browser.close();
  }

  if (!facts.banner) {
    problems.push('no #verdict-banner element');
  } else if (!facts.banner.text || facts.banner.height <= 0) {
    problems.push('the #verdict-banner element is empty or not shown');
  } else if (args.expect && !facts.banner.text.startsWith(args.expect)) {
    problems.push(`verdict banner reads "${facts.banner.text.slice(0, 60)}", expected it to ` +
      `start with ${args.expect}`);
  }
  for (const id of SECTIONS) {
    const s = facts.sections[id];
    if (!s) {
      problems.push(`section #${id} is missing`);
      continue;
    }
    if (s.tag !== 'section') problems.push(`#${id} is a <${s.tag}>, not a <section>`);
    if (!s.heading) problems.push(`section #${id} has no <h2> heading`);
    if (s.text <= s.heading.length) problems.push(`section #${id} is empty`);
    if (s.height <= 0 || s.width <= 0) problems.push(`section #${id} is not shown`);
  }
  const expected = SECTIONS.filter((id) => facts.order.includes(id));
  const actual = facts.order.filter((id) => SECTIONS.includes(id));
  if (expected.join() !== actual.join()) {
    problems.push(`sections out of order: ${actual.join(', ')}`);
  }
  if (facts.scripts > 0) problems.push(`${facts.scripts} <script> element(s) in the page`);
  for (const s of facts.svgs) {
    if (s.width <= 0 || s.height <= 0) problems.push(`chart ${s.i} in #${s.section} has no size`);
  }
  if (facts.scrollWidth > facts.clientWidth + 1) {
    problems.push(`the page is wider than the window (${facts.scrollWidth} > ` +
      `${facts.clientWidth} px)`);
  }
  for (const o of facts.overlaps.slice(0, 20)) console.log(`warning: overlapping labels in ${o}`);

  if (problems.length > 0) {
    console.error(`report_browser: ${problems.length} problem(s) with ${args.report}:`);
    for (const p of problems) console.error(`  - ${p}`);
    process.exit(1);
  }
  const verdict = facts.banner.text.split(/\s/)[0];
  console.log(`ok: ${path.basename(args.report)}: "${facts.title}", verdict ${verdict}, ` +
    `${SECTIONS.length} sections, ${facts.svgs.length} charts; screenshot ${args.screenshot}`);
}

main().catch((e) => {
  console.error(`report_browser: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
