// flux-converger dashboard: refreshes the live parts of the page in place, so scroll position
// and filters (they live in the URL) survive; submits the filter form when a select changes.
// No HTML is built here: the server's escaped page is parsed and its live nodes swapped in.
(function () {
  'use strict';

  var form = document.getElementById('filters');
  if (form) {
    form.querySelectorAll('select').forEach(function (select) {
      select.addEventListener('change', function () { form.submit(); });
    });
  }

  var main = document.querySelector('main[data-refresh]');
  if (!main || !window.fetch || !window.DOMParser) { return; }
  var every = Number(main.getAttribute('data-refresh')) * 1000;
  if (!(every > 0)) { return; }
  document.documentElement.classList.add('live');

  // <details> a reader opened or closed keep their state across refreshes.
  function openState() {
    var state = {};
    document.querySelectorAll('details.revision').forEach(function (d, i) { state[i] = d.open; });
    return state;
  }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    fetch(window.location.href, { headers: { Accept: 'text/html' }, cache: 'no-store', credentials: 'same-origin' })
      .then(function (response) {
        if (!response.ok) { throw new Error('HTTP ' + response.status); }
        return response.text();
      })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, 'text/html');
        var opened = openState();
        document.querySelectorAll('[data-live][id]').forEach(function (current) {
          var fresh = next.getElementById(current.id);
          if (fresh) { current.replaceWith(document.importNode(fresh, true)); }
        });
        document.querySelectorAll('details.revision').forEach(function (d, i) {
          if (i in opened) { d.open = opened[i]; }
        });
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
