// flux-converger dashboard: refreshes the live parts of the page in place, so scroll position,
// filters and page (they live in the URL) survive; submits the filter form when a select
// changes; shows record times as "5m ago".
// No HTML is built here: the server's escaped page is parsed and its live nodes swapped in.
// A refresh asks with If-None-Match: while nothing changed the server answers 304 with no body
// (the list is kept encoded there), and nothing is parsed here.
(function () {
  'use strict';

  var form = document.getElementById('filters');
  if (form) {
    form.querySelectorAll('select').forEach(function (select) {
      select.addEventListener('change', function () { form.submit(); });
    });
  }

  // The list is rendered once per change and served as long as nothing changes, so it carries
  // RFC 3339 times; the relative time is computed here, at every tick.
  function ago(at) {
    var seconds = Math.floor((Date.now() - at) / 1000);
    if (seconds < 5) { return 'just now'; }
    if (seconds < 60) { return seconds + 's ago'; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + 'm ago'; }
    if (seconds < 86400) { return Math.floor(seconds / 3600) + 'h ago'; }
    return Math.floor(seconds / 86400) + 'd ago';
  }
  function relativeTimes() {
    document.querySelectorAll('time[data-ago][datetime]').forEach(function (time) {
      var at = Date.parse(time.getAttribute('datetime'));
      if (!isNaN(at)) { time.textContent = ago(at); }
    });
  }
  relativeTimes();

  var main = document.querySelector('main[data-refresh]');
  if (!main || !window.fetch || !window.DOMParser) { return; }
  var every = Number(main.getAttribute('data-refresh')) * 1000;
  if (!(every > 0)) { return; }
  document.documentElement.classList.add('live');
  // The page's own ETag (the list carries it); none on pages rendered per request.
  var etag = main.getAttribute('data-etag');

  // <details> a reader opened or closed keep their state across refreshes.
  function openState() {
    var state = {};
    document.querySelectorAll('details.revision').forEach(function (d, i) { state[i] = d.open; });
    return state;
  }

  function checked() {
    var refreshed = document.getElementById('refreshed');
    if (refreshed) { refreshed.textContent = 'checked ' + new Date().toLocaleTimeString(); }
  }

  function swap(text) {
    var next = new DOMParser().parseFromString(text, 'text/html');
    var opened = openState();
    document.querySelectorAll('[data-live][id]').forEach(function (current) {
      var fresh = next.getElementById(current.id);
      if (fresh) { current.replaceWith(document.importNode(fresh, true)); }
    });
    document.querySelectorAll('details.revision').forEach(function (d, i) {
      if (i in opened) { d.open = opened[i]; }
    });
  }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    var headers = { Accept: 'text/html' };
    if (etag) { headers['If-None-Match'] = '"' + etag + '"'; }
    // no-store: the browser's cache neither answers nor revalidates on its own, so a 304
    // reaches this script as a 304 (nothing to parse) and a 200 as the new page.
    fetch(window.location.href, { headers: headers, cache: 'no-store', credentials: 'same-origin' })
      .then(function (response) {
        if (response.status === 304) { return null; }
        if (!response.ok) { throw new Error('HTTP ' + response.status); }
        var tag = response.headers.get('ETag');
        etag = tag ? tag.replace(/^W\//, '').replace(/"/g, '') : null;
        return response.text();
      })
      .then(function (text) {
        if (text !== null) { swap(text); }
        relativeTimes();
        checked();
        document.documentElement.classList.remove('stale');
      })
      .catch(function () {
        document.documentElement.classList.add('stale');
      })
      .then(schedule);
  }

  function schedule() { window.setTimeout(refresh, every); }
  schedule();
})();
