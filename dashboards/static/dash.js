// allocsoak's dashboard: draws the charts (uPlot) from the soak's JSON and,
// on the live server, polls it every 5 seconds and updates the page in
// place. An export sets window.ALLOCSOAK (static/data.js) instead.
(function () {
  "use strict";
  const body = document.body;
  const root = body.dataset.root;
  const live = body.dataset.live === "1";
  const range = body.dataset.range || "night";
  const charts = {};
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];

  async function load(name, query) {
    if (window.ALLOCSOAK) return window.ALLOCSOAK[name];
    const response = await fetch(root + "api/" + name + ".json" + (query || ""), { cache: "no-store" });
    if (!response.ok) throw new Error(name + ": " + response.status);
    return response.json();
  }

  function draw(el, key, opts, data) {
    const width = Math.max(el.clientWidth, 300);
    if (charts[key] && charts[key].series.length === opts.series.length) {
      charts[key].setData(data);
      return;
    }
    if (charts[key]) charts[key].destroy();
    el.textContent = "";
    const o = Object.assign({ width: width, height: 220, axes: [{}, { size: 70 }] }, opts);
    charts[key] = new uPlot(o, data, el);
  }

  function series(labels) {
    return [{}].concat(labels.map(function (label, i) {
      return { label: label, stroke: palette[i % palette.length], spanGaps: true, width: 1.5 };
    }));
  }

  function drawTimeline(t) {
    document.querySelectorAll(".chart[data-metric]").forEach(function (el) {
      const metric = el.dataset.metric;
      if (metric === "source_coverage") return;
      if (metric === "groups") {
        draw(el, metric, { series: series(["crash groups"]) }, [t.group_times, t.groups]);
        return;
      }
      if (metric === "total_execs") {
        draw(el, metric, { series: series(["all slots"]) }, [t.times, t.total_execs]);
        return;
      }
      const rows = t[metric];
      if (!rows) return;
      if (metric === "corpus") {
        draw(el, metric, { series: series(t.slots.concat(["all slots"])) },
          [t.times].concat(rows, [t.total_corpus]));
        return;
      }
      draw(el, metric, { series: series(t.slots) }, [t.times].concat(rows));
    });
  }

  // One chart per work (a target's programs, a trace): each allocator's
  // retained memory against ops, beside its peers' on the same work.
  function drawDrift(list) {
    const holder = document.getElementById("drift-charts");
    if (!holder || !list.length) return;
    const works = [];
    list.forEach(function (d) { if (works.indexOf(d.work) < 0) works.push(d.work); });
    works.forEach(function (work) {
      const lines = list.filter(function (d) { return d.work === work; });
      let el = holder.querySelector('.chart[data-work="' + CSS.escape(work) + '"]');
      if (!el) {
        const figure = document.createElement("figure");
        const caption = document.createElement("figcaption");
        caption.textContent = work + ": retained MiB against ops, one line per allocator";
        el = document.createElement("div");
        el.className = "chart";
        el.dataset.work = work;
        figure.append(caption, el);
        holder.append(figure);
      }
      // One x axis of ops: each line's points, the others null there.
      const xs = [];
      lines.forEach(function (d, i) { d.ops.forEach(function (x, j) { xs.push([x, i, d.retained_mib[j]]); }); });
      xs.sort(function (a, b) { return a[0] - b[0]; });
      const data = [xs.map(function (p) { return p[0]; })];
      lines.forEach(function (_, i) {
        data.push(xs.map(function (p) { return p[1] === i ? p[2] : null; }));
      });
      draw(el, "drift:" + work, {
        scales: { x: { time: false } },
        axes: [{ label: "ops", size: 50 }, { label: "retained MiB", size: 70 }],
        series: series(lines.map(function (d) { return d.allocator; })),
      }, data);
    });
  }

  function drawCoverage(c) {
    const el = document.querySelector('.chart[data-metric="source_coverage"]');
    if (!el || !c.times.length) return;
    draw(el, "source_coverage", {
      axes: [{}, { label: "% of regions", size: 70 }],
      series: series(c.allocators),
    }, [c.times].concat(c.regions));
  }

  function setText(el, text) {
    if (el && el.textContent !== String(text)) el.textContent = text;
  }

  function updateOverview(o) {
    setText(document.querySelector('[data-fact="state"]'), o.state);
    setText(document.querySelector('[data-fact="elapsed"]'), o.elapsed_secs == null ? "-" : o.elapsed_secs);
    setText(document.querySelector('[data-fact="remaining"]'), o.remaining_secs == null ? "-" : o.remaining_secs);
    setText(document.querySelector('[data-fact="groups"]'), o.groups);
    setText(document.querySelector('[data-fact="crashes"]'), o.crashes);
    setText(document.querySelector('[data-fact="duty"]'), o.duty_cycle == null ? "-" : (o.duty_cycle * 100).toFixed(1) + " %");
    let execs = 0, corpus = 0;
    o.slots.forEach(function (s) {
      execs += s.execs_per_sec;
      corpus += s.corpus;
      const row = document.querySelector('tr[data-slot="' + s.id + '"]');
      if (!row) return;
      const cell = function (field) { return row.querySelector('[data-field="' + field + '"]'); };
      setText(cell("weight"), s.weight.toFixed(2));
      setText(cell("slices"), s.slices);
      setText(cell("execs_per_sec"), Math.round(s.execs_per_sec));
      setText(cell("cov"), s.cov);
      setText(cell("ft"), s.ft);
      setText(cell("corpus"), s.corpus);
      setText(cell("findings"), s.groups + " / " + s.crashes);
      setText(cell("drift"), s.drift);
      setText(cell("now"), s.fuzzing ? "fuzzing" : "");
    });
    setText(document.querySelector('[data-fact="execs"]'), Math.round(execs));
    setText(document.querySelector('[data-fact="corpus"]'), corpus);
    body.dataset.updated = String(Date.now());
  }

  async function refresh() {
    try {
      if (document.getElementById("slots")) {
        updateOverview(await load("overview"));
        drawTimeline(await load("timeline", "?range=" + encodeURIComponent(range)));
        drawDrift(await load("drift"));
        drawCoverage(await load("coverage"));
      }
    } catch (e) {
      body.dataset.error = String(e);
      console.error("allocsoak dashboard:", e);
    }
  }

  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      const text = document.getElementById(button.dataset.copy).textContent;
      if (navigator.clipboard) navigator.clipboard.writeText(text);
    });
  });

  refresh();
  if (live) setInterval(refresh, 5000);
})();
