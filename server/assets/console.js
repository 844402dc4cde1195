// qflow console: the one piece of script. It draws the deployment's own BPMN diagram
// interchange with the vendored bpmn-js viewer and marks the instance's nodes on it.
// Every page works without it; the diagram is the only thing it adds.
(function () {
  'use strict';
  var box = document.getElementById('diagram');
  if (!box || typeof window.BpmnJS !== 'function') { return; }
  function list(name) {
    try { return JSON.parse(box.getAttribute(name) || '[]'); } catch (e) { return []; }
  }
  function say(state, text) {
    box.setAttribute('data-state', state);
    var note = document.getElementById('diagram-note');
    if (note && text) { note.textContent = text; }
  }
  var viewer = new window.BpmnJS({ container: box });
  fetch(box.getAttribute('data-source'), { credentials: 'same-origin' })
    .then(function (r) {
      if (!r.ok) { throw new Error('the model could not be read (' + r.status + ')'); }
      return r.text();
    })
    .then(function (xml) { return viewer.importXML(xml); })
    .then(function () {
      var canvas = viewer.get('canvas');
      var registry = viewer.get('elementRegistry');
      canvas.zoom('fit-viewport');
      // fit-viewport never zooms in; a small model is enlarged to fill the box (at most 2×).
      var vb = canvas.viewbox();
      var scale = Math.min(vb.outer.width / vb.inner.width, vb.outer.height / vb.inner.height) * 0.9;
      if (isFinite(scale) && scale > 1) { canvas.zoom(Math.min(scale, 2), 'auto'); }
      var marks = [['data-tokens', 'qf-token'], ['data-parks', 'qf-park'], ['data-failed', 'qf-failed']];
      var marked = [];
      var failed = list('data-failed');
      marks.forEach(function (m) {
        list(m[0]).forEach(function (id) {
          // A failed node is drawn as failed only, though a token still stands on it.
          if (m[1] !== 'qf-failed' && failed.indexOf(id) >= 0) { return; }
          if (registry.get(id)) { canvas.addMarker(id, m[1]); marked.push(id + ':' + m[1]); }
        });
      });
      box.setAttribute('data-marked', marked.join(' '));
      say('rendered', '');
    })
    .catch(function (e) {
      var text = String(e && e.message || e);
      if (/no diagram to display/i.test(text)) {
        say('no-di', 'This model has no diagram interchange (bpmndi), so there is no drawing; the nodes are listed below.');
      } else {
        say('error', 'The diagram could not be drawn: ' + text);
      }
    });
})();
