{{ config(order_by='(policy, window_name, scope, rank, song_id)') }}

with

windowed as (

    select * from {{ ref('int_listens__windowed') }}

),

build as (

    select * from {{ ref('int_chart__as_of') }}

),

-- only the rows that can make their board are ranked (sorting 88k rows instead of 650k at 10M
-- events): those at or over their board's floor
floors as (

    select window_name, scope, {{ rank_floor('listens', '(select keep_top from build)') }} as floor
    from windowed
    group by window_name, scope

),

candidates as (

    select windowed.*
    from windowed
    inner join floors using (window_name, scope)
    where windowed.listens >= floors.floor

),

-- every published policy ranks the same boards; each policy's rows are its own
ranked as (

    {%- for policy in var('policies') %}

    select
        '{{ policy }}' as policy,
        window_name,
        scope,
        song_id,
        listens,
        {{ rank_items(policy, partition_by='window_name, scope', score='listens', item='song_id') }} as rank
    from candidates
    {{ "union all" if not loop.last }}

    {%- endfor %}

),

final as (

    select
        build.as_of as as_of,
        ranked.policy as policy,
        ranked.window_name as window_name,
        ranked.scope as scope,
        toUInt32(ranked.rank) as rank,
        ranked.song_id as song_id,
        toUInt64(ranked.listens) as listens
    from ranked
    cross join build
    where ranked.rank <= build.keep_top

)

select * from final
