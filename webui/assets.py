"""The studio's stylesheet and the small scripts its HTML players run in the browser.

Kept as Python strings, not package data files, so that every install (editable, wheel, container)
carries them. Colours lean on Gradio's theme variables so a dark browser theme stays readable. The one browser
library the scripts load, wavesurfer.js for the episode's waveform, is vendored as released in webui/vendor/
(package data; `webui/vendor/refresh.sh` says which release and fetches it again).
"""

from __future__ import annotations

from pathlib import Path

STUDIO_CSS = """
.vx-preview { font-size: var(--text-md); }
.vx-preview.vx-empty, .vx-empty { color: var(--body-text-color-subdued); }
.vx-summary { margin: 0 0 .5em; }
.vx-legend { display: flex; flex-wrap: wrap; gap: .4em; margin-bottom: .6em; }
.vx-chip { border-left: .5em solid var(--vx-c); padding: .1em .6em; border-radius: .3em;
  background: var(--background-fill-secondary); }
.vx-turns { list-style: none; padding: 0; margin: 0; max-height: 32em; overflow-y: auto; }
.vx-turn { border-left: .3em solid var(--vx-c); padding: .3em .7em; margin: .35em 0;
  background: var(--background-fill-secondary); border-radius: 0 .4em .4em 0; }
.vx-turn p, .vx-cue p { display: block; margin: .15em 0 0; overflow-wrap: anywhere; }
.vx-who { font-weight: 600; color: var(--vx-c); margin-right: .6em; }
.vx-meta { color: var(--body-text-color-subdued); font-size: var(--text-sm); }
.vx-pause, .vx-more { color: var(--body-text-color-subdued); font-style: italic; padding: .2em .9em; }
.vx-error-message { margin: 0 0 .5em; color: var(--error-text-color, #b91c1c); }
.vx-source { list-style: none; padding: 0; margin: 0; font-family: var(--font-mono); font-size: var(--text-sm);
  border: 1px solid var(--border-color-primary); border-radius: .4em; overflow-x: auto; }
.vx-source li { display: flex; gap: .8em; padding: .1em .5em; white-space: pre; }
.vx-source code { background: none; padding: 0; }
.vx-source .vx-bad-line { background: rgba(220, 38, 38, .15); border-left: .25em solid #dc2626; }
.vx-line-number { color: var(--body-text-color-subdued); min-width: 2.5em; text-align: right; }
.vx-field-error { color: var(--error-text-color, #b91c1c); margin: .25em 0; font-size: var(--text-sm); }
.vx-field-error::before { content: "\\26A0  "; }
.vx-notice { color: var(--body-text-color-subdued); margin: .25em 0; font-size: var(--text-sm); }
/* Gradio's waveform player (a recording on Cast and Library) draws its times, speed and buttons in neutral-400, 1.9:1
   on white: as dark as the studio's other soft text (its classes are scoped by a hash, hence the !important), and
   only inside those players, so no other element that shares a class name changes colour. */
.vx-compact-audio :is(#time, #duration, .time, .duration, .playback, .text-button, .rewind, .skip, .play-pause-button,
  .action) {
  color: var(--body-text-color-subdued) !important; border-color: var(--body-text-color-subdued) !important; }
.vx-compact-audio .play-pause-button { fill: var(--body-text-color-subdued) !important; }
/* Before a replace or a delete, and once one is done: in colours that stand out in a light or a dark theme. */
.vx-question { color: #78350f; background: #fef3c7; border-left: .3em solid #d97706; border-radius: .3em;
  padding: .45em .8em; margin: .3em 0; font-size: var(--text-md); font-weight: 600; }
.vx-confirmed { color: #14532d; background: #dcfce7; border-left: .3em solid #16a34a; border-radius: .3em;
  padding: .35em .8em; margin: .3em 0; font-size: var(--text-md); }
.vx-confirmed::before { content: "\\2714  "; }
/* A refusal on Shows or publishing: as clear as the word that it worked, in the text's own size. */
#shows-status .vx-field-error, #history-publish-status .vx-field-error { color: #7f1d1d; background: #fee2e2;
  border-left: .3em solid #dc2626; border-radius: .3em; padding: .35em .8em; font-size: var(--text-md); }
/* Listen's regeneration messages, questions and takes: empty ones (the usual case) leave no gap above Downloads;
   a shown one brings its own margins. */
#regeneration-talk { gap: 0; }
#regeneration-talk > .block:has(> .html-container > .prose:empty) { display: none; }
#episode-redraw { display: none; }
#regeneration-talk > .row { gap: var(--spacing-md); }
#regeneration-talk > .row:has(button) { margin: .4em 0; }
.vx-intro { margin: .2em 0 .6em; font-size: var(--text-md); }
.vx-published { margin: .1em 0 .5em; }
.vx-episodes-head { font-weight: 600; margin: .6em 0 .2em; }
.vx-show-episodes { padding-left: 1.6em; margin: 0; }
.vx-show-episode { margin: .25em 0; }
.vx-show-episode > span { margin-right: .8em; }
.vx-unpublish { border: 1px solid var(--border-color-primary); border-radius: .3em; padding: .1em .6em;
  background: var(--button-secondary-background-fill); font-size: var(--text-sm); cursor: pointer; }
.vx-artwork { width: 160px; height: 160px; object-fit: cover; border-radius: .4em;
  border: 1px solid var(--border-color-primary); }
.vx-artwork-none { color: var(--body-text-color-subdued); max-width: 16em; }
.vx-warning { color: #92400e; background: #fef3c7; border-radius: 4px; padding: .2em .5em; margin: .3em 0 0;
  font-size: var(--text-sm); }
.vx-warning::before { content: "\\26A0  "; }
.vx-warning-count { color: #92400e; }
.vx-speaker-head { display: flex; align-items: center; gap: .5em; font-size: var(--text-lg); }
.vx-dot { width: .8em; height: .8em; border-radius: 50%; background: var(--vx-c); display: inline-block; }
.vx-plan ol, .vx-takes ol { list-style: none; padding: 0; margin: .3em 0; }
.vx-plan li[data-picked] { font-weight: 600; }
.vx-take-pair { display: flex; flex-wrap: wrap; align-items: center; gap: .4em 1em; margin: .3em 0; }
.vx-take-pair label { display: flex; align-items: center; gap: .4em; }
.vx-take-pair audio { height: 2.2em; max-width: 100%; }
.vx-job-head { display: flex; flex-wrap: wrap; align-items: center; gap: .5em; margin: 0 0 .5em; }
.vx-id { font-size: var(--text-sm); }
.vx-state { padding: .1em .6em; border-radius: 1em; font-size: var(--text-sm); font-weight: 600;
  background: #e5e7eb; color: #374151; }
.vx-state-running { background: #dbeafe; color: #1d4ed8; }
.vx-state-done { background: #dcfce7; color: #15803d; }
.vx-state-failed { background: #fee2e2; color: #b91c1c; }
.vx-state-cancelled, .vx-state-deleted { background: #f3f4f6; color: #4b5563; }
.vx-bar { height: .8em; border-radius: .4em; background: var(--background-fill-secondary); overflow: hidden;
  border: 1px solid var(--border-color-primary); }
.vx-bar > div { height: 100%; background: var(--color-accent, #f97316); transition: width .3s; }
.vx-figures { margin: .4em 0; }
.vx-segments ol { list-style: none; padding: 0; margin: 0; display: flex; flex-direction: column; gap: .3em; }
.vx-segment { display: flex; align-items: center; gap: .6em; flex-wrap: wrap; }
.vx-segment audio { height: 2.2em; max-width: 100%; }
/* The player stays in view while the transcript below it is read. Gradio's container hides its overflow, which
   makes it the box a sticky element sticks in, and it never scrolls; clipping instead keeps the page's scroll. */
.vx-episode-audio { width: 100%; margin: .3em 0 .6em; position: sticky; top: 0; z-index: 1; }
.gradio-container { overflow: clip !important; }
.vx-transcript { list-style: none; padding: 0; margin: 0; max-height: 26em; overflow-y: auto; position: relative; }
.vx-cue { border-left: .3em solid var(--vx-c); padding: .3em .7em; margin: .3em 0; border-radius: 0 .4em .4em 0; }
.vx-cue.vx-now { background: var(--background-fill-secondary); box-shadow: inset 0 0 0 1px var(--vx-c); }
.vx-seek { font-family: var(--font-mono); font-size: var(--text-sm); color: var(--body-text-color-subdued);
  background: none; border: none; cursor: pointer; padding: 0 .5em 0 0; }
.vx-seek:hover { text-decoration: underline; }
.vx-chapters ol { padding-left: 1.2em; }
/* its own stacking context: wavesurfer's layers (z-index 2 to 5) pass under the sticky player, not over it */
.vx-waveform { margin: 0 0 .6em; min-height: 64px; cursor: pointer; position: relative; z-index: 0; }
.vx-waveform ::part(region) { background-color: var(--vx-span); border: 0; border-radius: 0;
  border-left: 2px solid var(--background-fill-primary, #fff); height: 100% !important; }
.vx-waveform ::part(region)::after { content: none; }
.vx-table-wrap { overflow-x: auto; max-width: 100%; }
.vx-table { border-collapse: collapse; width: 100%; font-size: var(--text-sm); }
.vx-table th, .vx-table td { text-align: left; padding: .35em .6em; white-space: nowrap;
  border-bottom: 1px solid var(--border-color-primary); }
.vx-voice-use { margin: .3em 0; font-size: var(--text-sm); padding: .2em .6em; border-radius: .3em;
  background: var(--background-fill-secondary); }
.vx-voice-use::before { content: "\\2714  "; }
.vx-voice-use[data-uses="none"] { color: var(--body-text-color-subdued); }
.vx-voice-use[data-uses="none"]::before { content: ""; }
.vx-voice-use[data-uses="unusable"] { color: var(--error-text-color, #b91c1c); }
.vx-voice-use[data-uses="unusable"]::before { content: "\\2718  "; }
.vx-voice-preview { display: flex; align-items: center; gap: .6em; flex-wrap: wrap; }
.vx-voice-preview audio { height: 2.2em; max-width: 100%; }
.vx-brand { margin: .2em 0; font-size: var(--text-xxl); }
.vx-compact-audio .upload-container, .vx-compact-audio .boundedheight {
  height: 10em !important; min-height: 0 !important; }
/* Its label takes its own line (Gradio floats it over the drop area, where on a phone it hid the upload icon), and
   the drop area's text fits the compact height. */
.vx-compact-audio > label[data-testid="block-label"] { position: static; }
.vx-compact-audio [data-testid="upload-text"] { min-height: 0; }
/* A dropdown's text ends before its arrow (Gradio lets a long choice run under it). */
.wrap-inner .secondary-wrap input { padding-right: 1.8em; text-overflow: ellipsis; }
/* History's headings keep their words whole: Gradio sizes a column by its cells, so "Progress" above "100%" broke into
   "Progr/ess" on a phone; the column takes the heading's width instead, and the table scrolls sideways. */
#history-table [role="columnheader"] { min-width: max-content !important; max-width: none !important; }
#history-table [role="columnheader"] .header { word-break: keep-all !important; overflow-wrap: normal !important; }
.vx-downloads ul { list-style: none; padding: 0; margin: .3em 0; }
.vx-downloads li { margin: .25em 0; overflow-wrap: anywhere; }
.vx-downloads-head { font-weight: 600; margin: 0; }
@media (max-width: 640px) {
  .vx-turns, .vx-transcript { max-height: 55vh; }
  .vx-table th, .vx-table td { padding: .3em .4em; }
  /* Write, stacked: the editor column's parts join the row, and the preview comes right after the script box and
     its problem, before the upload and example controls. */
  #write-row { flex-direction: column; flex-wrap: nowrap; }
  #write-editor { display: contents; }
  #write-preview { order: 1; }
  #script-upload-row, #example-row, #script-replace-confirm { order: 2; }
}
"""

# Where the studio serves the browser libraries of webui/vendor/, under its own path (`webui.app`).
VENDOR_FOLDER = "vendor"
VENDOR_DIR = Path(__file__).parent / VENDOR_FOLDER

# What holds on every screen, in the page's <head>:
# - one sound at a time: whatever starts playing (a live part, the episode, a take, a voice preview, a recording in
#   Gradio's waveform player) pauses every other audio or video element, shown or hidden. Gradio's waveform player
#   (wavesurfer.js) plays an <audio> in a shadow root, which the document's queries do not find and whose events do
#   not reach the document: every element's play() is therefore seen where it is called, and the elements that
#   played are remembered.
#   `window.voxcastCurrent` is the one that started last, or the episode that took over from the live parts
#   (EPISODE_PLAYER_JS): the live player moves on to the next part only while its own part is the current one;
# - the screen (tab) the producer is on is kept in the address (#write, #listen…), so a reload lands there; Listen
#   opens at its top (not where the screen before was scrolled to);
# - an error that appears out of sight (a refused Generate sends the page to Cast, whose rows run below the fold)
#   is brought into view, and so is a question asked out of sight (Load example's, below the fold at desktop width).
PAGE_HEAD = """
<script>
const vxPlayed = new Set();
const vxPlaying = (playing) => {
  window.voxcastCurrent = playing;
  vxPlayed.add(playing);
  new Set([...document.querySelectorAll('audio, video'), ...vxPlayed]).forEach((other) => {
    if (other !== playing && !other.paused) other.pause();
  });
};
document.addEventListener('play', (event) => {
  if (event.target instanceof HTMLMediaElement) vxPlaying(event.target);
}, true);
const vxPlay = HTMLMediaElement.prototype.play;
HTMLMediaElement.prototype.play = function (...args) {
  if (this.getRootNode() !== document && !vxPlayed.has(this)) this.addEventListener('play', () => vxPlaying(this));
  vxPlaying(this);
  return vxPlay.apply(this, args);
};
const vxScreens = {write: 'write', cast: 'cast', generate: 'generate', listen: 'finish', history: 'history',
                   shows: 'shows', admin: 'admin'};  // the address's name of each screen: its tab's id
const vxScreenTab = (name) => document.querySelector(`[role="tab"][data-tab-id="${vxScreens[name]}"]`);
let vxScreenShown = null;
new MutationObserver(() => {
  const name = Object.keys(vxScreens).find((screen) => vxScreenTab(screen)?.getAttribute('aria-selected') === 'true');
  if (name && location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  // Listen opens at its top: a job that ends sends the page there from wherever Generate or History was scrolled to
  if (name === 'listen' && vxScreenShown !== 'listen') {
    const tabs = vxScreenTab(name).closest('[role="tablist"]');
    if (tabs && tabs.getBoundingClientRect().top < 0) tabs.scrollIntoView({block: 'start'});
  }
  vxScreenShown = name ?? vxScreenShown;
}).observe(document.documentElement, {subtree: true, attributes: true, attributeFilter: ['aria-selected']});
// After a reload, the screen in the address opens once its tab is drawn and the key has been tried (Admin's tab is
// drawn only for an admin key).
const vxWanted = location.hash.slice(1);
if (vxWanted in vxScreens && vxWanted !== 'write') {
  const opener = new MutationObserver(() => {
    if (!document.querySelector('#connection p')) return;
    opener.disconnect();
    const tab = vxScreenTab(vxWanted);
    if (tab && tab.getAttribute('aria-selected') !== 'true') tab.click();
  });
  opener.observe(document.documentElement, {subtree: true, childList: true, attributes: true});
}
// Gradio now and then leaves Listen's episode box blank when the screen is first drawn as the job's update arrives
// (after a reload on a busy machine: the update carried the episode, the box holds nothing, not even its empty
// text). A box still blank a second later is drawn again by the studio (hidden `#episode-redraw`), a few times at most.
let vxRedraws = 0;
let vxBlankSince = null;
setInterval(() => {
  const box = document.querySelector('#episode .prose');
  const shown = box !== null && box.offsetParent !== null;
  const blank = shown && box.childElementCount === 0 && box.textContent.trim() === '';
  if (!blank) { vxBlankSince = null; return; }
  vxBlankSince ??= performance.now();
  if (performance.now() - vxBlankSince < 1000 || vxRedraws >= 3) return;
  vxRedraws += 1;
  vxBlankSince = null;
  document.querySelector('#episode-redraw')?.click();
}, 250);
let vxErrorsSeen = new Set();
new MutationObserver(() => requestAnimationFrame(() => {
  const shown = [...document.querySelectorAll('.vx-field-error, .vx-question')]
    .filter((error) => error.offsetParent !== null);
  const fresh = shown.find((error) => !vxErrorsSeen.has(error));
  vxErrorsSeen = new Set(shown);
  if (!fresh) return;
  const box = fresh.getBoundingClientRect();
  if (box.top < 0 || box.bottom > window.innerHeight) fresh.scrollIntoView({block: 'center', behavior: 'smooth'});
})).observe(document.documentElement, {childList: true, subtree: true});
</script>
"""

# The episode player: highlight the turn being heard and keep it in view; a click on a time, or on a turn's span
# in the waveform, plays from there; a regenerated turn (data-focus) plays as soon as the new audio is loaded.
EPISODE_PLAYER_JS = r"""
const cueAt = (time) => [...element.querySelectorAll('.vx-cue')]
  .find((cue) => time >= Number(cue.dataset.start) && time < Number(cue.dataset.end));
element.addEventListener('timeupdate', (event) => {
  if (!event.target.matches('.vx-episode-audio')) return;
  const current = cueAt(event.target.currentTime);
  element.querySelectorAll('.vx-cue.vx-now').forEach((cue) => {
    if (cue !== current) { cue.classList.remove('vx-now'); cue.removeAttribute('aria-current'); }
  });
  if (current && !current.classList.contains('vx-now')) {
    current.classList.add('vx-now');
    current.setAttribute('aria-current', 'true');
    const list = current.parentElement;
    list.scrollTop = Math.max(0, current.offsetTop - list.clientHeight / 3);
  }
}, true);
const playFrom = (seconds) => {
  const audio = element.querySelector('.vx-episode-audio');
  if (!audio) return;
  audio.currentTime = seconds;
  audio.play().catch(() => {});
};
element.addEventListener('click', (event) => {
  const seek = event.target.closest('.vx-seek');
  if (seek) playFrom(Number(seek.dataset.start));
});
// The waveform (wavesurfer.js, served from the studio's vendor folder) plays the same <audio>: the peaks come with
// the page, so nothing is downloaded or decoded twice; each turn is a span in its speaker's colour.
let waveform = null;
let drawing = 0;
const drawWaveform = async () => {
  const ticket = ++drawing;
  if (waveform) { waveform.destroy(); waveform = null; }
  const box = element.querySelector('.vx-waveform');
  const audio = element.querySelector('.vx-episode-audio');
  if (!box || !audio) return;
  const root = (window.gradio_config && window.gradio_config.root) || location.pathname;
  const base = new URL(`${root.replace(/\/+$/, '')}/VENDOR_FOLDER/wavesurfer/`, location.href);
  const [{default: WaveSurfer}, {default: RegionsPlugin}] = await Promise.all(
    ['wavesurfer.esm.js', 'regions.esm.js'].map((file) => import(new URL(file, base).href)));
  if (ticket !== drawing || !box.isConnected) return;  // another episode came meanwhile
  const regions = RegionsPlugin.create();
  waveform = WaveSurfer.create({
    container: box, media: audio, peaks: [JSON.parse(box.dataset.peaks)], duration: Number(box.dataset.duration),
    height: 64, barWidth: 2, barGap: 1, barRadius: 1, waveColor: '#9ca3af', progressColor: '#4b5563',
    cursorColor: 'var(--color-accent, #f97316)', cursorWidth: 2, plugins: [regions],
  });
  // once ready: a span added before the player knows the duration is clamped to nothing
  waveform.once('ready', () => {
    element.querySelectorAll('.vx-cue').forEach((cue) => {
      const colour = getComputedStyle(cue).borderLeftColor;  // the speaker's, as rgb(r, g, b)
      const span = regions.addRegion({
        id: `turn-${cue.dataset.index}-${cue.dataset.start}`, start: Number(cue.dataset.start),
        end: Number(cue.dataset.end), drag: false, resize: false,
      });
      // Gradio's page styles every wavesurfer region (its trim handles) from outside: .vx-waveform's rules
      // take over, in this colour
      span.element.style.setProperty('--vx-span', colour.replace(/^rgb\((.*)\)$/, 'rgba($1, 0.3)'));
    });
    box.dataset.ready = 'true';
  });
  regions.on('region-clicked', (region, event) => { event.stopPropagation(); playFrom(region.start); });
};
// An episode shown: a live part still playing stops (it is hidden on Generate now) and the episode carries on about
// where the listener was (`window.voxcastHeard`, kept by the live player); a regenerated turn plays from its start.
// The live player counts as listening too between two parts (the part heard last ended, the next not yet come): the
// episode is the current player from now on (`window.voxcastCurrent`, PAGE_HEAD), so no later part plays by itself.
// Called when the screen is first drawn too: Gradio draws a tab's components only once the tab is opened.
const takeOver = () => {
  const audio = element.querySelector('.vx-episode-audio');
  if (!audio) return;
  const parts = [...document.querySelectorAll('.vx-segment audio')];
  const current = window.voxcastCurrent;
  const live = current instanceof HTMLMediaElement && parts.some((part) => part.src === current.src)
    && (!current.paused || current.ended);
  parts.forEach((part) => part.pause());
  const focus = element.querySelector('.vx-cue[data-focus]');
  const from = focus ? Number(focus.dataset.start) : live ? window.voxcastHeard || 0 : null;
  if (from === null) return;
  window.voxcastCurrent = audio;
  audio.addEventListener('loadedmetadata', () => playFrom(from), {once: true});
  audio.load();
};
drawWaveform();
takeOver();
watch('value', () => { drawWaveform(); takeOver(); });
""".replace("VENDOR_FOLDER", VENDOR_FOLDER)

# A job's progress: the first time it shows a job (just sent, or reopened), it is brought into view with the live
# player below it, at any width: a phone or a laptop's Generate screen has it below the fold.
JOB_PROGRESS_JS = """
let shownJob = null;
watch('value', () => {
  const job = element.querySelector('.vx-job')?.dataset.job ?? null;
  if (job === null || job === shownJob) { shownJob = job; return; }
  shownJob = job;
  if (element.offsetParent !== null) element.scrollIntoView({block: 'start', behavior: 'smooth'});
});
"""

# Segments heard while the job generates: when one ends, play the next, now or as soon as it arrives. Beside the
# buffer, how far the listener is and how much is ready ahead of that, kept as new parts arrive. A job's first part
# is brought into view: the progress above it was scrolled to when the job showed, but the page may have ended there
# then, and the parts come below it seconds later.
SEGMENT_PLAYER_JS = """
let firstShown = null;  // the source of the first part brought into view
let waitingAfter = null;
let heardAt = null;  // [part index, seconds into it, the part's source] of the last position played
const partAt = (index) => element.querySelector(`.vx-segment[data-index="${index}"] audio`);
const clock = (seconds) => `${Math.floor(seconds / 60)}:${String(Math.floor(seconds % 60)).padStart(2, '0')}`;
const showHeard = () => {
  const label = element.querySelector('.vx-live-heard');
  if (!label || heardAt === null) return;
  if (partAt(heardAt[0])?.src !== heardAt[2]) { heardAt = null; label.hidden = true; return; }  // another job's
  const lengths = [...element.querySelectorAll('.vx-segment')].map((item) => Number(item.dataset.seconds));
  const heard = lengths.slice(0, heardAt[0]).reduce((sum, seconds) => sum + seconds, 0) + heardAt[1];
  const total = lengths.reduce((sum, seconds) => sum + seconds, 0);
  window.voxcastHeard = heard;  // where the episode carries on when it comes (EPISODE_PLAYER_JS)
  label.textContent = `· ${clock(heard)} heard, ${Math.max(0, Math.round(total - heard))} s ready ahead`;
  label.hidden = false;
};
element.addEventListener('timeupdate', (event) => {
  const item = event.target.closest('.vx-segment');
  if (!item) return;
  heardAt = [Number(item.dataset.index), event.target.currentTime, event.target.src];
  showHeard();
}, true);
// Only while the part that ended is still the page's current player (`window.voxcastCurrent`, PAGE_HEAD): once
// anything else played since, or the episode took over, the live parts stay quiet.
const playAfter = (index, src) => {
  if (window.voxcastCurrent?.src !== src) { waitingAfter = null; return; }
  const next = partAt(index + 1);
  if (next) { waitingAfter = null; next.play().catch(() => {}); } else { waitingAfter = [index, src]; }
};
element.addEventListener('ended', (event) => {
  const item = event.target.closest('.vx-segment');
  if (item) playAfter(Number(item.dataset.index), event.target.src);
}, true);
watch('value', () => {
  if (waitingAfter !== null) {  // not when the parts are another job's now
    const [index, src] = waitingAfter;
    if (partAt(index)?.src === src) playAfter(index, src); else waitingAfter = null;
  }
  showHeard();
  const first = partAt(0);
  if (first && first.src !== firstShown) {
    firstShown = first.src;
    if (element.offsetParent !== null) first.closest('.vx-segment').scrollIntoView({block: 'nearest'});
  }
});
"""

# A voice preview: each play brings a new player (its data-take differs), which starts at once (and, as anything
# that plays, stops every other sound on the page: `PAGE_HEAD`), so playing the same voice again
# starts it over.
VOICE_PREVIEW_JS = """
watch('value', () => {
  const audio = element.querySelector('.vx-voice-preview audio');
  if (audio) audio.play().catch(() => {});
});
"""
